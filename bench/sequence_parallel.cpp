// Sequence parallelism (grid.sequence_parallel) at tp = the world size against the same tensor
// parallelism without it, side by side: each rank's peak activation memory during forward +
// backward (a counting CPU allocator: the bytes LibTorch holds above what the parameters and
// gradients held before) against the accountant's figure (ModelPlan::activation_bytes), and the
// step time (the slowest rank's) in alternating rounds.
//
//   mpiexec -n TP bench_sequence_parallel TYPE N_LAYER T C HEADS B ROUNDS
//
// TYPE gpt | llama; sdpa attention, vocabulary 256 (bytes), fp32, the same ids on every rank.
// The SP regions' bytes are not separable in one run, so they are derived: with S the bytes the
// tensor-parallel layers split, a rank holds m₁ = R + S at tp = 1 (measured on rank 0 alone),
// R + S/t at tp = t without SP and R_sp + S/t with it; so R = (t·m_t − m₁)/(t − 1) and
// R_sp = R + m_sp − m_t. Prints one row per mode and R_sp / R against the ideal 1/t.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench_mpi.hpp"
#include "counting_allocator.hpp"
#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/model/layout.hpp"
#include "gridtrain/model/registry.hpp"

using namespace gridtrain;
using gridtrain::bench::CountingAllocator;
using gridtrain::bench::max_over_ranks;
using gridtrain::bench::median;

namespace {

struct Mode {
  const char* name;
  bool tensor_parallel, sequence_parallel;
  std::shared_ptr<Model> model = {};
  double accountant = 0, measured = 0;  // bytes on the rank that holds the most
  std::vector<double> seconds = {};
};

}  // namespace

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 8, "mpiexec -n TP bench_sequence_parallel TYPE N_LAYER T C HEADS B ROUNDS");
  if (!world.ok) return 2;
  CountingAllocator& counting = bench::counting_cpu_allocator();
  {
    const int B = std::atoi(argv[6]), rounds = std::atoi(argv[7]), t = world.size;
    Axis tp("tp", MPI_COMM_WORLD);
    const DataShape data{256};
    torch::manual_seed(1);  // the same ids on every rank
    const auto T = std::atoi(argv[3]);
    const auto idx = torch::randint(256, {B, T}, torch::kLong), targets = torch::randint(256, {B, T}, torch::kLong);
    Config c = parse_config("", "bench", {std::string("--model.type=") + argv[1], std::string("--model.n_layer=") + argv[2],
                                          std::string("--model.block_size=") + argv[3],
                                          std::string("--model.n_embd=") + argv[4],
                                          std::string("--model.n_head=") + argv[5], "--model.attention=sdpa"});
    std::vector<Mode> modes = {{"tp 1", false, false}, {"tp, no SP", true, false}, {"tp + SP", true, true}};
    for (auto& m : modes) {
      if (!m.tensor_parallel && world.rank != 0) continue;  // tp = 1 is measured on rank 0 alone
      ModelLayout layout;
      if (m.tensor_parallel) layout = {&tp, 0, 1, {{}}, t, m.sequence_parallel};
      m.model = make_model(c, data, layout);
      m.model->initialize(1);
      m.accountant = plan_model(c, data, layout)->activation_bytes(B, 4, 1);
      m.model->loss(idx, targets).backward();  // warm-up: every .grad exists from here on
    }
    for (int r = 0; r < rounds; ++r)
      for (auto& m : modes) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (!m.model) continue;
        const auto run = bench::measure(counting, [&] { m.model->loss(idx, targets).backward(); });
        m.seconds.push_back(m.tensor_parallel ? max_over_ranks(run.seconds) : run.seconds);
        m.measured = std::max(m.measured, run.peak_bytes);
      }
    for (auto& m : modes)
      if (m.tensor_parallel) m.measured = max_over_ranks(m.measured), m.accountant = max_over_ranks(m.accountant);
    if (world.rank == 0) {
      const double mib = 1024.0 * 1024.0, m1 = modes[0].measured, mt = modes[1].measured, msp = modes[2].measured;
      std::printf("%s, sdpa attention, n_layer %s, T %d, C %s, %s heads, micro-batch %d, fp32, tp %d, %d threads, "
                  "%d rounds\n", argv[1], argv[2], T, argv[4], argv[5], B, t, torch::get_num_threads(), rounds);
      std::printf("%-10s %15s %13s %12s %14s\n", "mode", "accountant MiB", "measured MiB", "meas/acct", "time/no SP");
      for (const auto& m : modes)
        std::printf("%-10s %15.1f %13.1f %12.3f %14s\n", m.name, m.accountant / mib, m.measured / mib,
                    m.measured / m.accountant,
                    m.tensor_parallel ? std::to_string(median(m.seconds) / median(modes[1].seconds)).substr(0, 5).c_str() : "-");
      const double R = (t * mt - m1) / (t - 1), R_sp = R + msp - mt;
      std::printf("SP regions: %.1f MiB without SP, %.1f MiB with it: %.3f of it (ideal 1/tp = %.3f)\n", R / mib,
                  R_sp / mib, R_sp / R, 1.0 / t);
    }
  }
  MPI_Finalize();
  return 0;
}
