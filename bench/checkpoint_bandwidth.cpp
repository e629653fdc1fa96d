// Checkpoint write/read bandwidth of gridtrain's parallel-HDF5 CheckpointFile against a raw
// sequential POSIX write/read of the same byte count on the same disk, in the same run.
//
//   mpiexec -n P bench_checkpoint_bandwidth DIR TOTAL_MB [TENSORS] [REPEATS]
//
// The state is TENSORS fp32 tensors of equal size, TOTAL_MB in all. Each tensor's rows are split
// among the P ranks (each writes its hyperslab), as sharded state is; the raw baseline has rank 0
// write the same number of bytes to one file with write(2). Both include fsync (HDF5: H5Fflush →
// MPI_File_sync; raw: fsync). Before each read the file's pages are dropped from the page cache
// (posix_fadvise DONTNEED) so that reads come from the disk. Prints MB/s and the ratios.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mpi.h>

#include "bench_mpi.hpp"
#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/util/hash.hpp"

using namespace gridtrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double raw_write(const std::string& path, const std::vector<float>& buf, std::size_t total_bytes) {
  const auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (std::size_t done = 0; done < total_bytes;) {
    const std::size_t n = std::min(total_bytes - done, buf.size() * sizeof(float));
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) std::abort();
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  return seconds_since(t0);
}

double raw_read(const std::string& path, std::vector<float>& buf, std::size_t total_bytes) {
  bench::drop_cache(path);
  const auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::size_t got = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size() * sizeof(float))) > 0;) got += static_cast<std::size_t>(n);
  ::close(fd);
  if (got != total_bytes) {
    std::fprintf(stderr, "raw read of %s: %zu of %zu bytes (%s)\n", path.c_str(), got, total_bytes, std::strerror(errno));
    std::abort();
  }
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 3, "bench_checkpoint_bandwidth DIR TOTAL_MB [TENSORS] [REPEATS]");
  if (!world.ok) return 2;
  const int rank = world.rank, size = world.size;
  const std::string dir = argv[1];
  const double total_mb = std::atof(argv[2]);
  const int tensors = argc > 3 ? std::atoi(argv[3]) : 64;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  const hsize_t cols = 1024;
  const hsize_t rows = static_cast<hsize_t>(total_mb * 1024 * 1024 / 4 / cols / tensors);
  const std::vector<hsize_t> shape{rows, cols};
  const auto [r0, r1] = share(rows, rank, size);
  const Slab mine = r1 > r0 ? Slab{{r0, 0}, {r1 - r0, cols}} : Slab::none();
  std::vector<float> data((r1 - r0) * cols);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(splitmix64(i + rank) % 1000) * 1e-3f;
  const double bytes = static_cast<double>(rows * cols * 4) * tensors;
  const std::string h5 = dir + "/bench.h5", raw = dir + "/bench.raw";

  double best[4] = {1e30, 1e30, 1e30, 1e30};  // h5 write, h5 read, raw write, raw read
  for (int rep = 0; rep < repeats; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    {
      auto f = CheckpointFile::create(h5, MPI_COMM_WORLD);
      for (int t = 0; t < tensors; ++t) f.write("/t" + std::to_string(t), DType::F32, shape, mine, data.data());
      f.flush();
      f.close();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    best[0] = std::min(best[0], seconds_since(t0));
    if (rank == 0) bench::drop_cache(h5);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    {
      auto f = CheckpointFile::open(h5, MPI_COMM_WORLD);
      for (int t = 0; t < tensors; ++t) f.read("/t" + std::to_string(t), DType::F32, shape, mine, data.data());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    best[1] = std::min(best[1], seconds_since(t0));
    if (rank == 0) {
      std::vector<float> chunk(4 << 20);
      best[2] = std::min(best[2], raw_write(raw, chunk, static_cast<std::size_t>(bytes)));
      best[3] = std::min(best[3], raw_read(raw, chunk, static_cast<std::size_t>(bytes)));
    }
  }
  if (rank == 0) {
    const double mb = bytes / 1e6;
    std::printf("state %.0f MB in %d tensors of (%llu, %llu) fp32 on %d ranks, best of %d\n", mb, tensors,
                static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols), size, repeats);
    std::printf("write: checkpoint %.0f MB/s, raw %.0f MB/s, ratio %.2f\n", mb / best[0], mb / best[2],
                best[2] / best[0]);
    std::printf("read:  checkpoint %.0f MB/s, raw %.0f MB/s, ratio %.2f (checkpoint read includes checksum verification)\n",
                mb / best[1], mb / best[3], best[3] / best[1]);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 may still be timing the raw baseline
  if (rank == 0) std::remove(h5.c_str()), std::remove(raw.c_str());
  MPI_Finalize();
  return 0;
}
