// Graceful stop on SIGUSR1 (Slurm's --signal=B:USR1@T) and SIGTERM (scancel, preemption): the
// handler only records the signal; at the next step boundary all ranks agree on it with one
// reduction (agree_stop_signal in grid/grid.hpp: one signalled rank is enough), save a
// checkpoint and exit with kExitStopped.
#pragma once

namespace gridtrain {

/// Exit code of a run that stopped on a signal after saving a checkpoint (EX_TEMPFAIL: "try
/// again": requeue it and it resumes from `latest`).
inline constexpr int kExitStopped = 75;

/// Installs the SIGUSR1/SIGTERM handlers. Further signals while stopping are recorded again
/// and otherwise ignored, so they cannot interrupt a checkpoint write.
void install_stop_handlers();

/// The last stop signal this process received, or 0 (grid/grid.hpp agrees on it over the grid).
int received_stop_signal();

}  // namespace gridtrain
