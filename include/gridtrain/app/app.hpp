// Entry points of the gridtrain program, kept free of torch so that main and the CLI compile fast.
#pragma once
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

}  // namespace gridtrain
