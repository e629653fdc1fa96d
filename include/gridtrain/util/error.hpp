// Errors, LAMMPS style (error->all / error->one).
//
//  - gridtrain::Error: a problem every rank sees the same way (deck, grid shape, dataset header).
//    Rank 0 reports it once and every rank exits cleanly with a non-zero code.
//  - any other exception escaping a rank is a fault on that rank: it prints
//    "ERROR on rank N: ..." and aborts the whole job with MPI_Abort, so nothing hangs.
//
// Turning a failure on some ranks into one every rank knows is comm/agree.hpp.
#pragma once
#include <stdexcept>
#include <string>

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

/// A fault on this rank: prints "ERROR on rank N: message" to stderr and aborts the whole job
/// (MPI_Abort on MPI_COMM_WORLD with kExitError). Safe from any thread under MPI_THREAD_MULTIPLE.
[[noreturn]] void abort_job(const std::string& message);

}  // namespace gridtrain
