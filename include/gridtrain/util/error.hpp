// Errors, LAMMPS style (error->all / error->one).
//
//  - gridtrain::Error: a problem every rank sees the same way (deck, grid shape, dataset header).
//    Rank 0 reports it once and every rank exits cleanly with a non-zero code.
//  - any other exception escaping a rank is a fault on that rank: it prints
//    "ERROR on rank N: ..." and aborts the whole job with MPI_Abort, so nothing hangs.
//
// agree_on() turns a phase that may fail on some ranks only (opening a file, writing a dataset)
// into knowledge every rank shares: who failed first, with what message and OS error. agree()
// is its common use: every rank throws the same gridtrain::Error.
#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <mpi.h>

namespace gridtrain {

/// A problem every rank sees; the message names the file/key/value and what would be valid.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Exit code of a run that stopped on a reported (collective) error.
inline constexpr int kExitError = 1;

/// An I/O failure that just happened: std::system_error carrying errno when the OS set one
/// (its what() then ends in the OS text, e.g. "No space left on device"), else
/// std::runtime_error(what). Call it right after the failing call, before errno can change.
std::runtime_error io_error(const std::string& what);

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

/// Rank 0's text on every rank of comm (what rank 0 decided). Collective over comm.
std::string broadcast_text(std::string text, MPI_Comm comm);

/// A fault on this rank: prints "ERROR on rank N: message" to stderr and aborts the whole job
/// (MPI_Abort on MPI_COMM_WORLD with kExitError). Safe from any thread under MPI_THREAD_MULTIPLE.
[[noreturn]] void abort_job(const std::string& message);

}  // namespace gridtrain
