// A run owns its directories: output.dir (log.gridtrain, metrics.jsonl) and checkpoint.dir.
//
// Claiming them (collective; rank 0 looks, every rank learns the verdict):
//  1. Each directory is created and locked with gridtrain.lock, made with O_EXCL and holding
//     the host, PID and SLURM_JOB_ID of rank 0. A lock whose process is gone (same host, PID not
//     running) or that belongs to this Slurm job (a requeue after a node failure) is stale and is
//     taken over, saying so; any other stops this run with an error naming its holder.
//  2. A fresh run (checkpoint.resume = none) where another run left metrics.jsonl or checkpoints
//     stops with an error naming the directory, unless output.overwrite = true (then those files
//     are deleted, each named in the log). checkpoint.resume = auto continues that run instead.
// The locks are released by the destructor; a run that aborts leaves them, and the next run
// finds them stale.
#pragma once
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class RunDirectories {
 public:
  /// Collective over world. Throws gridtrain::Error (the same on every rank) when a directory
  /// cannot be created or is locked by another live run, or holds another run's files (2 above).
  RunDirectories(const Config& cfg, MPI_Comm world, Log& log);
  ~RunDirectories();
  RunDirectories(const RunDirectories&) = delete;
  RunDirectories& operator=(const RunDirectories&) = delete;

 private:
  void claim(const Config& cfg, Log& log);  // rank 0: steps 1 and 2 above
  void release();                           // removes the locks this run holds
  std::vector<std::string> locks_;          // lock files this run holds (rank 0)
};

}  // namespace gridtrain
