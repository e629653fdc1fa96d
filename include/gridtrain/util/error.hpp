// Errors, LAMMPS style (error->all / error->one).
//
//  - gridtrain::Error: a problem every rank sees the same way (deck, grid shape, dataset header).
//    Rank 0 reports it once and every rank exits cleanly with a non-zero code.
//  - any other exception escaping a rank is a fault on that rank: it prints
//    "ERROR on rank N: ..." and aborts the whole job with MPI_Abort, so nothing hangs.
//
// agree() turns a phase that may fail on some ranks only (opening a file, say) into a
// collective Error: all ranks learn the first failing rank's message and throw it together.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include <mpi.h>

namespace gridtrain {

/// A problem every rank sees; the message names the file/key/value and what would be valid.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs fn on every rank of comm. If it throws on any rank, every rank throws gridtrain::Error
/// carrying the message of the lowest failing rank. Collective over comm; never hangs when only
/// some fail — provided fn itself makes no collective calls on comm that a failing rank skips.
void agree(MPI_Comm comm, const std::function<void()>& fn);

/// Exit code of a run that stopped on a reported (collective) error.
inline constexpr int kExitError = 1;

}  // namespace gridtrain
