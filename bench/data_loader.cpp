// Training-data loader throughput: what the step loop's data path delivers per rank with nothing
// else running (layout-independent sampling, a pread per window, the loader thread keeping DEPTH
// batches ready), from a corpus whose pages were first dropped from the page cache.
//
//   mpiexec -n P bench_data_loader CORPUS T ROWS BATCHES [DEPTH [VOCAB]]
//
// CORPUS is any data.path: an HDF5 corpus, or Megatron indexed datasets, whose tokens are checked
// against VOCAB (model.vocab_size: their index records none).
//
// Each rank reads BATCHES batches of ROWS windows of T + 1 tokens, as dp rank r of P would
// (rows r·ROWS.. of each global batch), and prints tokens/s (T tokens per window, as the summary
// counts them) per rank; rank 0 also prints the minimum over ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <mpi.h>

#include "bench_mpi.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/data/batches.hpp"

using namespace gridtrain;

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 5, "bench_data_loader CORPUS T ROWS BATCHES [DEPTH [VOCAB]]");
  if (!world.ok) return 2;
  const int rank = world.rank, size = world.size;
  const int T = std::atoi(argv[2]), rows = std::atoi(argv[3]), batches = std::atoi(argv[4]);
  const int depth = argc > 5 ? std::atoi(argv[5]) : 2, vocab = argc > 6 ? std::atoi(argv[6]) : 0;
  const TokenData data = load_tokens(argv[1], MPI_COMM_WORLD, static_cast<std::size_t>(T) + 1, "", {"", vocab});
  if (rank == 0)
    for (const auto& f : data.files) bench::drop_cache(f);
  MPI_Barrier(MPI_COMM_WORLD);
  Sampler sampler(data.train.size(), T, 1234);
  const auto mine = static_cast<std::uint64_t>(rank) * static_cast<std::uint64_t>(rows);
  const auto global = static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(size);
  BatchPrefetcher windows(rows, T + 1, torch::kCPU, [&](std::uint64_t i, std::int64_t* out) {
    copy_window(data.train, sampler.window_start(mine + i), T, out);
  }, depth, global);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t checksum = 0;
  for (int b = 0; b < batches; ++b)  // as the step loop: each get() asks for the next depth batches
    checksum += windows.get(static_cast<std::uint64_t>(b) * global)[0][0].item<std::int64_t>();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double rate = static_cast<double>(rows) * T * batches / s, lowest = rate;
  MPI_Reduce(&rate, &lowest, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  std::printf("rank %d: %d batches of %d x %d tokens in %.3f s: %.0f tokens/s (checksum %lld)\n", rank, batches, rows,
              T, s, rate, static_cast<long long>(checksum));
  if (rank == 0)
    std::printf("loader, %d rank(s), T = %d, depth %d, cold page cache: %.0f tokens/s per rank (min over ranks)\n",
                size, T, depth, lowest);
  MPI_Finalize();
  return 0;
}
