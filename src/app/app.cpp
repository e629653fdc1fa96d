#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/app/app.hpp"

#include "gridtrain/app/build_info.hpp"
#include "gridtrain/plan/peak.hpp"
#include "gridtrain/app/run_directory.hpp"
#include "gridtrain/app/trainer.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/signals.hpp"
#include "gridtrain/util/threads.hpp"
#include "gridtrain/util/timer.hpp"
#include "gridtrain/version.hpp"

namespace gridtrain {
namespace {

// sgemm GFLOP/s per thread below which the BLAS is the bottleneck: the Netlib reference BLAS
// runs at 1-5 (4.2 measured on this project's AVX-512 machine), an optimized one at 30 and more
// on any x86-64 core of the last decade (OpenBLAS: 110 there).
constexpr double kSlowSgemmGflops = 15.0;

}  // namespace

int run_training(const Config& cfg, MPI_Comm world, Log& log) {
  install_stop_handlers();
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const RunDirectories directories(cfg, world, log);
  // A run that may resume continues the earlier run's log rather than wiping it.
  log.open_file(cfg.output.dir + "/log.gridtrain", cfg.checkpoint.resume.mode != Resume::Mode::None);
  log.print(std::string("gridtrain ") + kVersion + " on " + std::to_string(size) + " MPI ranks, deck " +
            cfg.deck_name + "\n" + build_info());

  const ThreadPlan threads = plan_threads(world);
  apply_threads(threads.threads);
  log.print("Threads: " + std::to_string(threads.threads) + " per rank (" + threads.source + ")\n");
  agree(world, [&] { set_matmul_backend(cfg.model.matmul); });  // a node refusing onednn stops every rank
  log.print("Linear layers' fp32 CPU matmuls: " + describe_matmul(cfg.model.matmul) + "\n");
  const BlasInfo blas = detect_blas();  // printed by build_info
  // Only a measured slow sgemm is a problem: a LibTorch with MKL inside ignores the system BLAS.
  const double sgemm = blas.reference ? probe_matmul_gflops(PrecisionType::Fp32, false) : 0.0;
  if (blas.reference && sgemm < kSlowSgemmGflops * threads.threads)
    log.warn("\n  ************************************************************************\n"
             "  LibTorch's sgemm runs at " + fmt("%.1f", sgemm) + " GFLOP/s on the Netlib REFERENCE BLAS (" +
             blas.library + "),\n  about 15x slower than OpenBLAS. Fix (Debian/Ubuntu, as root):\n"
             "    apt-get install libopenblas0-pthread && update-alternatives --set \\\n"
             "      libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3\n"
             "  ************************************************************************");
  log.print("Effective configuration:\n" + config_text(cfg) + "\n");
  Trainer trainer(cfg, world, log);  // it plans the launch and finds the peak once its rank has its device
  const RunResult r = trainer.run();
  if (r.stop_signal == 0) return 0;
  return r.checkpointed ? kExitStopped : 128 + r.stop_signal;
}

}  // namespace gridtrain
