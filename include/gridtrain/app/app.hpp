// Training, the gridtrain program's main verb (kept free of torch so that the CLI compiles fast).
#pragma once
#include <string>

#include <mpi.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// Sets threads, checks the BLAS, measures the peak, echoes the config and trains. Collective.
/// Returns 0; kExitStopped when a signal stopped the run early and a checkpoint was saved;
/// 128 + signal when it stopped early without one (checkpoint.dir = none).
int run_training(const Config& cfg, MPI_Comm world, Log& log);

}  // namespace gridtrain
