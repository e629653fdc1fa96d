// Allreduce bandwidth on one axis: raw MPI_Allreduce against gridtrain's Axis::allreduce_sum
// (what the reducer posts per bucket) and the two-phase compressed allreduce for fp16, bf16 and
// onebit, over message sizes from 4 KiB to MAX_MIB, in one run.
//
//   mpiexec -n P bench_allreduce_bandwidth [MAX_MIB]
//
// Definitions as nccl-tests: algbw = bytes / time (bytes = fp32 message size);
// busbw = algbw · 2(p−1)/p. "wire" = bytes this rank sent (ring model for fp32; counted for the
// compressed exchange).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/comm/compressor.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"
#include "gridtrain/util/process_setup.hpp"
#include "bench_mpi.hpp"

using namespace gridtrain;
using bench::time_it;

int main(int argc, char** argv) {
  prepare_process();
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const double max_mib = argc > 1 ? std::atof(argv[1]) : 256;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  auto axis_owner = std::make_unique<Axis>("dp", dup);  // freed before MPI_Finalize
  Axis& axis = *axis_owner;
  const double bus = 2.0 * (p - 1) / p;
  if (rank == 0)
    std::printf("%d ranks; columns: size, then per method time_us / algbw GB/s / busbw GB/s / wire bytes\n"
                "%10s | %-34s | %-34s | %-34s | %-34s | %-34s\n",
                p, "bytes", "MPI_Allreduce", "Axis::allreduce_sum (reducer)", "fp16 two-phase", "bf16 two-phase",
                "onebit two-phase");
  for (std::size_t bytes = 4096; bytes <= static_cast<std::size_t>(max_mib * 1024 * 1024); bytes *= 4) {
    const std::size_t n = bytes / 4;
    std::vector<float> data(n, 1.0f);
    const auto tensor = torch::from_blob(data.data(), {static_cast<std::int64_t>(n)}, torch::kFloat32);
    std::string row;
    char cell[96];
    auto report = [&](double t, double wire) {
      std::snprintf(cell, sizeof cell, " | %9.1f %7.2f %7.2f %9.3g", t * 1e6, bytes / t / 1e9, bytes / t / 1e9 * bus,
                    wire);
      row += cell;
    };
    const double ring = bus * static_cast<double>(bytes);
    report(time_it([&] { MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                       MPI_COMM_WORLD); }),
           ring);
    report(time_it([&] { axis.allreduce_sum(data.data(), n, "bench").wait(); }), ring);
    for (auto kind : {CompressorKind::Fp16, CompressorKind::Bf16, CompressorKind::OneBit}) {
      auto c = make_compressor(kind, Memory::Host);
      FeedbackState state;
      std::size_t wire = 0;
      const double t = time_it([&] { wire = compressed_allreduce_mean(axis, *c, tensor, state, "bench"); });
      report(t, static_cast<double>(wire));
    }
    if (rank == 0) std::printf("%10zu%s\n", bytes, row.c_str());
  }
  axis_owner.reset();
  MPI_Finalize();
  return 0;
}
