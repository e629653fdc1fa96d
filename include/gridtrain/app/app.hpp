// Entry points of the gridtrain program, kept free of torch so that main and the CLI compile fast.
#pragma once
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// The whole command line: `gridtrain [-i DECK] [--section.key=value ...]`, `--help`,
/// `--version`, `prepare text ...`. Initializes and finalizes MPI. Returns the exit code:
/// 0 on success, kExitError after a reported error; a fault on one rank aborts the job.
int cli_main(int argc, char** argv);

/// Sets threads, checks the BLAS, measures the peak, echoes the config and trains. Collective.
/// Returns 0; kExitStopped when a signal stopped the run early and a checkpoint was saved;
/// 128 + signal when it stopped early without one (checkpoint.dir = none).
int run_training(const Config& cfg, MPI_Comm world, Log& log);

/// --dry-run: prints the estimated memory per rank (parameters, gradients, optimizer state,
/// activations) and FLOPs per step for cfg on world's grid, without training. Collective.
/// Throws gridtrain::Error for a grid that does not fit world or an unreadable dataset.
int dry_run(const Config& cfg, MPI_Comm world, Log& log);

/// `gridtrain predict`'s request (the model: app/predict.hpp).
struct PredictRequest {
  int ranks = 0;                ///< target rank (GPU) count
  std::vector<int> layout;      ///< dp,tp,pp[,zero] to predict alone; empty: rank every layout
  std::string device = "cpu";   ///< a100 | h100 | h200 | cpu (the matmul probe on this machine)
  double achievable = 0.5;      ///< device: fraction of the datasheet peak that compute reaches
  double flops_per_s = 0;       ///< achievable FLOP/s per rank; overrides the device's or the probe's
  int ranks_per_node = 0;       ///< 0: the device's node (8 GPUs) or, on cpu, every rank on one node
  double cores_per_node = 0;    ///< cpu: 0 = this machine's cores
  double intra_gbps = 0, intra_us = -1, inter_gbps = 0, inter_us = -1;  ///< links; 0 / -1: the machine's
  bool recompute = false;       ///< full activation recomputation
  int grad_bytes = 4;           ///< bytes per gradient element all-reduced over dp
  int top = 10;                 ///< layouts listed
  bool csv = false;             ///< CSV rows instead of the table
};
/// Prints the predicted step time (and its parts, throughput, MFU, memory) of r.layout, or of
/// every layout of r.ranks ranks ranked, for cfg's model and batch. Rank 0 prints; no grid is
/// built. Throws gridtrain::Error for an unknown device, a bad layout or unreadable data.
int predict(const Config& cfg, const PredictRequest& r, MPI_Comm world, Log& log);

}  // namespace gridtrain
