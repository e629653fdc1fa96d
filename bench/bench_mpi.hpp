// What the MPI benchmarks share: start-up with a usage check, a median timer, the largest value
// over the ranks, and dropping a file's pages from the page cache so that the next read comes
// from the disk.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

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

/// The median of v (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// v's largest value over the ranks of MPI_COMM_WORLD (collective).
inline double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

/// Median seconds of `run` over enough repetitions for ~0.2 s (3 to 50), each timed from a
/// barrier to the slowest rank's end.
template <class F>
double time_it(F&& run) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> times;
  double total = 0;
  while (times.size() < 3 || (total < 0.2 && times.size() < 50)) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    run();
    const double dt = max_over_ranks(std::chrono::duration<double>(Clock::now() - t0).count());
    times.push_back(dt);
    total += dt;
  }
  return median(times);
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
