// The MoE token exchange's bandwidth on one ep axis of all ranks: raw MPI_Alltoallv against
// gridtrain's Axis::all_to_all_v (what TokenDispatch posts) and TokenDispatch::dispatch itself
// (the count exchange, the sort and the expert-major permutation included), for the same rows,
// over routed rows per rank from 256 to MAX_ROWS, in one run.
//
//   mpiexec -n P bench_all_to_all_bandwidth [C] [MAX_ROWS]
//
// Each rank routes its rows uniformly, the same number to every expert (2 experts per rank), so
// that every exchange moves rows/P to each peer. Definitions as nccl-tests' alltoall: algbw =
// bytes / time (bytes = the rank's rows · C · 4), busbw = algbw · (p−1)/p.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/parallel/expert_parallel.hpp"
#include "bench_mpi.hpp"

using namespace gridtrain;
using bench::time_it;

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 1, "bench_all_to_all_bandwidth [C] [MAX_ROWS]");
  const int rank = world.rank, p = world.size;
  const std::int64_t C = argc > 1 ? std::atoll(argv[1]) : 1024, max_rows = argc > 2 ? std::atoll(argv[2]) : 65536;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  auto axis_owner = std::make_unique<Axis>("ep", dup);  // freed before MPI_Finalize
  Axis& ep = *axis_owner;
  const std::int64_t experts = 2 * p;
  const double bus = static_cast<double>(p - 1) / p;
  if (rank == 0)
    std::printf("%d ranks, C = %lld fp32; columns: rows per rank, bytes, then per method time_us / algbw GB/s / "
                "busbw GB/s, and each method's busbw / MPI_Alltoallv's\n%8s %11s | %-26s | %-26s | %-26s | %s\n",
                p, static_cast<long long>(C), "rows", "bytes", "MPI_Alltoallv", "Axis::all_to_all_v",
                "TokenDispatch::dispatch", "ratios");
  for (std::int64_t rows = 256; rows <= max_rows; rows *= 4) {
    // rows tokens with k = 1, token n to expert n mod E: rows / E to each expert, rows / p to each rank.
    const auto chosen = torch::arange(rows, torch::kInt64).remainder(experts).unsqueeze(1);
    const auto x = torch::randn({rows, C});
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(p), rows / p);
    const std::vector<int> count(static_cast<std::size_t>(p), static_cast<int>(rows / p));
    std::vector<int> at(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) at[r] = r * static_cast<int>(rows / p);
    auto out = torch::empty_like(x);
    MPI_Datatype row;
    MPI_Type_contiguous(static_cast<int>(C * 4), MPI_BYTE, &row);
    MPI_Type_commit(&row);
    const double bytes = static_cast<double>(rows * C * 4);
    std::string line;
    std::vector<double> busbw;
    auto report = [&](double t) {
      char cell[64];
      std::snprintf(cell, sizeof cell, " | %9.1f %7.2f %7.2f", t * 1e6, bytes / t / 1e9, bytes / t / 1e9 * bus);
      line += cell;
      busbw.push_back(bytes / t * bus);
    };
    report(time_it([&] {
      MPI_Alltoallv(x.data_ptr(), count.data(), at.data(), row, out.data_ptr(), count.data(), at.data(), row, MPI_COMM_WORLD);
    }));
    report(time_it([&] { ep.all_to_all_v(x.data_ptr(), counts, out.data_ptr(), counts, C * 4, "bench").wait(); }));
    report(time_it([&] {
      torch::NoGradGuard no_grad;
      TokenDispatch(chosen, experts, EpRegion{&ep}).dispatch(x);
    }));
    MPI_Type_free(&row);
    if (rank == 0)
      std::printf("%8lld %11.0f%s | %.3f %.3f\n", static_cast<long long>(rows), bytes, line.c_str(), busbw[1] / busbw[0],
                  busbw[2] / busbw[0]);
  }
  axis_owner.reset();
  MPI_Finalize();
  return 0;
}
