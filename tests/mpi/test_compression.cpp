// Gradient compression: the kernels' spec on every rank, and the two-phase compressed allreduce
// under mpiexec -n 2 and -n 4.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "gridtrain/comm/compressor.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"

using namespace gridtrain;

namespace {

std::vector<float> random_vector(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

torch::Tensor view_of(std::vector<float>& v) {
  return torch::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, torch::kFloat32);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

int rank_of_world() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace

TEST_CASE("fp16 and bf16 round within half an ulp of their format", "[np2][np4]") {
  const auto x = random_vector(1003, 3 + rank_of_world());
  for (auto [kind, half_ulp] : {std::pair{CompressorKind::Fp16, 1.0 / 2048}, {CompressorKind::Bf16, 1.0 / 256}}) {
    auto c = make_compressor(kind, Memory::Host);
    CAPTURE(c->name());
    std::vector<unsigned char> bytes(c->compressed_bytes(x.size()));
    std::vector<float> back(x.size());
    c->compress(x.data(), x.size(), nullptr, bytes.data());
    c->decompress(bytes.data(), x.size(), back.data());
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::abs(x[i]) > 1e-4f) REQUIRE(std::abs(back[i] - x[i]) <= half_ulp * std::abs(x[i]));
  }
}

TEST_CASE("onebit keeps the error-feedback invariant: decompress(compress(x)) + residual' == x + residual",
          "[np2][np4]") {
  auto c = make_compressor(CompressorKind::OneBit, Memory::Host);
  const std::size_t n = 777;  // not a multiple of 8
  CHECK(c->compressed_bytes(n) == 4 + 98);
  auto residual = random_vector(n, 11, 0.1f);
  for (int round = 0; round < 5; ++round) {
    const auto x = random_vector(n, 20 + round);
    const auto before = residual;
    std::vector<unsigned char> bytes(c->compressed_bytes(n));
    std::vector<float> out(n);
    c->compress(x.data(), n, residual.data(), bytes.data());
    c->decompress(bytes.data(), n, out.data());
    for (std::size_t i = 0; i < n; ++i)
      REQUIRE(out[i] + residual[i] == Approx(x[i] + before[i]).margin(1e-6));
    // every output is ±scale with scale = ||x + residual|| / sqrt(n)
    CHECK(std::abs(out[0]) == std::abs(out[n - 1]));
  }
}

TEST_CASE("compressed allreduce: every rank gets the same mean, within the format's rounding", "[np2][np4]") {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Axis axis("dp", dup, 60.0);
  const std::size_t n = 1001;
  const auto mine = random_vector(n, 100 + axis.rank());
  std::vector<float> exact(mine);
  MPI_Allreduce(MPI_IN_PLACE, exact.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (auto& v : exact) v /= static_cast<float>(p);

  for (auto [kind, tol] : {std::pair{CompressorKind::Fp16, 2e-3}, {CompressorKind::Bf16, 1.5e-2}}) {
    auto c = make_compressor(kind, Memory::Host);
    CAPTURE(c->name());
    auto data = mine;
    FeedbackState state;
    const auto bytes = compressed_allreduce_mean(axis, *c, view_of(data), state, "test");
    CHECK(rel_l2(data, exact) < tol);
    CHECK(bytes == 2 * (p - 1) * c->compressed_bytes((n + p - 1) / p));
    std::vector<float> lo(data), hi(data);  // bitwise identical on all ranks
    MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(n), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(n), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi);
  }

  // onebit: >= 25x fewer bytes than a fp32 ring allreduce; with error feedback on both sides the
  // running mean of the outputs converges to the true mean of a constant gradient.
  auto c = make_compressor(CompressorKind::OneBit, Memory::Host);
  FeedbackState state;
  std::vector<float> sum(n, 0.0f);
  const int rounds = 400;
  std::size_t bytes = 0;
  for (int t = 0; t < rounds; ++t) {
    auto data = mine;
    bytes = compressed_allreduce_mean(axis, *c, view_of(data), state, "onebit");
    for (std::size_t i = 0; i < n; ++i) sum[i] += data[i];
  }
  for (auto& v : sum) v /= rounds;
  const double fp32_ring = 2.0 * (p - 1) / p * 4.0 * n;
  CHECK(fp32_ring / static_cast<double>(bytes) >= 25.0);
  CHECK(rel_l2(sum, exact) < 0.05);
}
