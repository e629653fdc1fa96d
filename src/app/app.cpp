#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/app/app.hpp"
#include "gridtrain/app/run_directory.hpp"
#include "gridtrain/app/trainer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/signals.hpp"
#include "gridtrain/util/threads.hpp"
#include "gridtrain/util/timer.hpp"
#include "gridtrain/version.hpp"

namespace gridtrain {

double measure_sgemm_gflops(int n, int reps) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  auto c = torch::mm(a, b);  // warm-up: thread pool and BLAS buffers
  double best = 0.0;
  for (int i = 0; i < reps; ++i) {
    const Stopwatch clock;
    c = torch::mm(a, b);
    const double s = clock.seconds();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

int run_training(const Config& cfg, MPI_Comm world, Log& log) {
  install_stop_handlers();
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const RunDirectories directories(cfg, world, log);
  // A run that may resume continues the earlier run's log rather than wiping it.
  log.open_file(cfg.output.dir + "/log.gridtrain", cfg.checkpoint.resume.mode != Resume::Mode::None);
  log.print(std::string("gridtrain ") + kVersion + " on " + std::to_string(size) + " MPI ranks, deck " +
            cfg.deck_name + "\n");

  const ThreadPlan threads = plan_threads(world);
  apply_threads(threads.threads);
  log.print("Threads: " + std::to_string(threads.threads) + " per rank (" + threads.source + ")\n");
  const BlasInfo blas = detect_blas();
  log.print("BLAS: " + (blas.library.empty() ? std::string("unknown") : blas.library) + "\n");
  if (blas.reference)
    log.warn("\n  ************************************************************************\n"
             "  LibTorch is using the Netlib REFERENCE BLAS (" + blas.library + "),\n"
             "  about 15x slower than OpenBLAS for sgemm. Fix (Debian/Ubuntu, as root):\n"
             "    apt-get install libopenblas0-pthread && update-alternatives --set \\\n"
             "      libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3\n"
             "  ************************************************************************");

  double peak = cfg.output.peak_gflops;
  if (peak <= 0) {
    peak = measure_sgemm_gflops(1024, 3);
    char line[128];
    std::snprintf(line, sizeof line, "Peak: %.1f GFLOP/s per rank (1024^3 sgemm probe, rank 0)\n", peak);
    log.print(line);
  }
  log.print("Effective configuration:\n" + config_text(cfg) + "\n");
  Trainer trainer(cfg, world, log, peak);
  const RunResult r = trainer.run();
  if (r.stop_signal == 0) return 0;
  return r.checkpointed ? kExitStopped : 128 + r.stop_signal;
}

}  // namespace gridtrain
