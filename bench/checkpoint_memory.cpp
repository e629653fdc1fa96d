// What a checkpoint save costs in host memory and time at ZeRO stage 0 and stage 3 side by side:
// each rank's rise of its peak resident set during one save (the peak reset just before it),
// against the model state it writes itself (stage 3: its own pieces of the parameters and the
// optimizer state; stage 0: dp rank 0 writes everything), and the save and load times.
//
//   mpiexec -n P -x MALLOC_MMAP_THRESHOLD_=65536 bench_checkpoint_memory DECK DIR [--section.key=value ...]
//
// For each stage the deck (with the overrides) is built and saved once into DIR/stage-S (the
// first save, so the snapshot's buffers are new), then that checkpoint is loaded back into the
// same trainer. glibc's fixed mmap threshold returns freed large blocks to the system, so that
// the resident set follows what is allocated (else the whole tensors that initialization drew
// and freed stay resident and are reused). Rank 0 prints one row per stage with the maximum over
// ranks.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_mpi.hpp"
#include "gridtrain/app/trainer.hpp"

using namespace gridtrain;

namespace {

// VmRSS or VmHWM of this process, bytes.
double status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return 1024.0 * std::stod(line.substr(std::string(key).size()));
  return 0.0;
}

void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }  // VmHWM := VmRSS (Linux >= 4.0)

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 3, "bench_checkpoint_memory DECK DIR [--section.key=value ...]");
  if (!world.ok) return 2;
  std::stringstream deck;
  deck << std::ifstream(argv[1]).rdbuf();
  const std::string dir = argv[2];
  const std::vector<std::string> overrides(argv + 3, argv + argc);
  Log quiet(false);
  const double mib = 1024.0 * 1024.0;
  if (world.rank == 0)
    std::printf("%5s %14s %18s %18s %10s %10s %10s\n", "stage", "written MiB", "save peak rise MiB", "rise / written",
                "save s", "load s", "state MiB");
  for (int stage : {0, 3}) try {
    Config c = parse_config(deck.str(), argv[1], overrides);
    c.optim.zero_stage = stage;
    c.checkpoint.dir = dir + "/stage-" + std::to_string(stage);
    c.checkpoint.resume = {Resume::Mode::None, ""};
    c.checkpoint.async = false;
    Trainer t(c, MPI_COMM_WORLD, quiet, 1.0);
    const StateBytes s = t.state_bytes();
    // What this rank writes of the model state: its pieces at stage 3, everything on dp rank 0 at stage 0.
    const double written = stage == 3 || t.grid().dp().rank() == 0 ? s.params + s.optimizer : 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    reset_peak();
    const double before = status_bytes("VmRSS:");
    auto t0 = std::chrono::steady_clock::now();
    t.checkpointer().save(0, t.sample_index(), 0, t.model(), t.optimizer());
    t.checkpointer().wait();
    const double save_s = seconds_since(t0), rise = status_bytes("VmHWM:") - before;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    t.checkpointer().load(c.checkpoint.dir + "/step-00000000.h5", t.model(), t.optimizer());
    const double load_s = seconds_since(t0), state = s.total();
    const double w = max_over_ranks(written), r = max_over_ranks(rise);
    const double ratio = max_over_ranks(written > 0 ? rise / written : 0.0);
    const double ss = max_over_ranks(save_s), ls = max_over_ranks(load_s), st = max_over_ranks(state);
    if (world.rank == 0)
      std::printf("%5d %14.1f %18.1f %18.3f %10.2f %10.2f %10.1f\n", stage, w / mib, r / mib, ratio, ss, ls, st / mib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint_memory: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
