// Agreement after a phase that may fail on some ranks only (opening a file, writing a dataset):
// agree_on() turns it into knowledge every rank shares — who failed first, with what message and
// OS error. agree() is its common use: every rank throws the same gridtrain::Error.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <mpi.h>

namespace gridtrain {

/// What every rank learns from agree_on() when the phase failed somewhere.
struct Failure {
  int rank = -1;         ///< the lowest rank whose phase threw
  int failed_ranks = 0;  ///< how many ranks' phase threw
  std::string message;   ///< that rank's what(), with an OS error text another failed rank saw appended
};

/// Runs fn on every rank of comm, then every rank learns whether it threw on any rank. The
/// exchange waits at most timeout_s seconds (0 = no limit): past that it throws CommTimeout
/// naming `phase` (a peer failed inside a collective call that fn makes, or is stuck).
/// Collective over comm; fn must not make collective calls on comm itself.
std::optional<Failure> agree_on(MPI_Comm comm, const std::function<void()>& fn, double timeout_s = 0,
                                const std::string& phase = "");

/// agree_on() without a time limit, then every rank throws gridtrain::Error(message of the
/// lowest failing rank).
void agree(MPI_Comm comm, const std::function<void()>& fn);

/// Rank root's text on every rank of comm (what rank root decided). Collective over comm.
std::string broadcast_text(std::string text, MPI_Comm comm, int root = 0);

}  // namespace gridtrain
