// Small helpers for MPI tests.
#pragma once
#include <mpi.h>

#include <string>

namespace gridtrain::test {

/// Broadcasts a string from root over comm.
inline std::string bcast(std::string s, MPI_Comm comm, int root = 0) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, root, comm);
  s.resize(static_cast<std::size_t>(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, root, comm);
  return s;
}

}  // namespace gridtrain::test
