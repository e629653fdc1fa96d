// Small helpers for MPI tests.
#pragma once
#include <mpi.h>

#include <fstream>
#include <sstream>
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

/// The text of the file at path as rank 0 of comm reads it, on every rank (a log only rank 0 writes).
inline std::string read_on_root(const std::string& path, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::stringstream text;
  if (rank == 0) text << std::ifstream(path).rdbuf();
  return bcast(text.str(), comm);
}

}  // namespace gridtrain::test
