// --dry-run: what a run would hold and compute per rank, without training.
#pragma once
#include <mpi.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// --dry-run: prints the estimated memory per rank (parameters, gradients, optimizer state,
/// activations) and FLOPs per step for cfg on world's grid, without training. Collective.
/// Throws gridtrain::Error for a grid that does not fit world or an unreadable dataset.
int dry_run(const Config& cfg, MPI_Comm world, Log& log);

}  // namespace gridtrain
