#include "gridtrain/util/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include <mpi.h>

namespace gridtrain {

std::runtime_error io_error(const std::string& what) {
  const int code = errno;
  if (code != 0) return std::system_error(code, std::generic_category(), what);
  return std::runtime_error(what);
}

void abort_job(const std::string& message) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "ERROR on rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kExitError);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace gridtrain
