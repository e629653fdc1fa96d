// What the MPI benchmarks share: start-up with a usage check, and dropping a file's pages from
// the page cache so that the next read comes from the disk.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <mpi.h>

#include "gridtrain/util/process_setup.hpp"

namespace gridtrain::bench {

struct World {
  int rank = 0, size = 1;
  bool ok = true;  ///< false: too few arguments (usage printed, MPI finalized): return 2
};

/// prepare_process(), MPI_Init, and the usage line on rank 0 when argc < min_argc.
inline World start(int& argc, char**& argv, int min_argc, const char* usage) {
  prepare_process();
  MPI_Init(&argc, &argv);
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  if (argc < min_argc) {
    if (w.rank == 0) std::fprintf(stderr, "usage: %s\n", usage);
    MPI_Finalize();
    w.ok = false;
  }
  return w;
}

/// Writes back and drops path's cached pages (posix_fadvise DONTNEED).
inline void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace gridtrain::bench
