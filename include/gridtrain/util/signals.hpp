// Graceful stop on SIGUSR1 (Slurm's --signal=B:USR1@T) and SIGTERM (scancel, preemption): one
// thread takes them with sigwait() and records them, every other thread blocks them; at the next
// step boundary all ranks agree on it with one reduction (agree_stop_signal in grid/grid.hpp: one
// signalled rank is enough), save a checkpoint and exit with kExitStopped.
#pragma once

namespace gridtrain {

/// Exit code of a run that stopped on a signal after saving a checkpoint (EX_TEMPFAIL: "try
/// again": requeue it and it resumes from `latest`).
inline constexpr int kExitStopped = 75;

/// Blocks SIGUSR1 and SIGTERM in the calling thread, and so in every thread started after it
/// (MPI's, PMIx's, LibTorch's, ours), and starts the thread that takes them. Call it first in
/// main, before MPI_Init starts threads. Until install_stop_handlers() the two keep their default
/// action: the process terminates.
void start_signal_thread();

/// From now on SIGUSR1/SIGTERM are recorded, not fatal. Further signals while stopping are
/// recorded again and otherwise ignored: no thread but the signal thread ever sees them, so they
/// cannot interrupt a checkpoint write or a collective.
void install_stop_handlers();

/// The last stop signal this process received, or 0 (grid/grid.hpp agrees on it over the grid).
int received_stop_signal();

}  // namespace gridtrain
