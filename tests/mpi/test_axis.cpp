// Run under mpiexec -n 2 and -n 4: the axis collectives (fp32, and the 2-byte sums) and the
// communication timeout.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

using namespace gridtrain;

namespace {
MPI_Comm dup_world() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  return c;
}
}  // namespace

TEST_CASE("axis collectives deliver what MPI defines", "[np2][np4]") {
  Axis axis("dp", dup_world(), 30.0);
  const int p = axis.size(), r = axis.rank();
  const std::size_t n = 3;

  std::vector<float> all(p * n);  // block b holds b + 10·r
  for (int b = 0; b < p; ++b)
    for (std::size_t i = 0; i < n; ++i) all[b * n + i] = static_cast<float>(b + 10 * r + i);
  std::vector<float> mine(n);
  axis.reduce_scatter_sum(all.data(), mine.data(), n, "rs").wait();
  const float sum_r = 10.0f * p * (p - 1) / 2;  // Σ over ranks of 10·rank
  for (std::size_t i = 0; i < n; ++i) CHECK(mine[i] == static_cast<float>(p * (r + i)) + sum_r);

  int value = 100 + r;
  std::vector<int> gathered(p);
  axis.all_gather(&value, gathered.data(), sizeof(int)).wait();
  for (int q = 0; q < p; ++q) CHECK(gathered[q] == 100 + q);

  std::vector<int> out(p), in(p);
  for (int q = 0; q < p; ++q) in[q] = 1000 * r + q;  // block q goes to rank q
  axis.all_to_all(in.data(), out.data(), sizeof(int)).wait();
  for (int q = 0; q < p; ++q) CHECK(out[q] == 1000 * q + r);

  double token = r == p - 1 ? 3.25 : 0.0;
  axis.broadcast(&token, sizeof token, p - 1).wait();
  CHECK(token == 3.25);

  float ring = static_cast<float>(r), from_left = -1;
  auto s = axis.send(&ring, sizeof ring, (r + 1) % p, 7);
  axis.recv(&from_left, sizeof from_left, (r + p - 1) % p, 7).wait();
  s.wait();
  CHECK(from_left == static_cast<float>((r + p - 1) % p));

  std::vector<float> x(5, static_cast<float>(r + 1));
  axis.allreduce_sum(x.data(), x.size()).wait();
  CHECK(x[4] == static_cast<float>(p * (p + 1) / 2));
}

TEST_CASE("2-byte sums (bf16, fp16) round each pair's fp32 sum once, and count 2 bytes an element", "[np2]") {
  Axis axis("dp", dup_world(), 30.0);
  const int p = axis.size(), r = axis.rank();
  const std::int64_t n = 4099;  // not a multiple of the kernel's block
  // Rank q's values, known to every rank: more mantissa than the formats hold, so sums round.
  auto values = [&](int q, torch::ScalarType dtype) {
    return (torch::arange(p * n, torch::kDouble).mul(0.37).add(q).sin().mul(3.0 + q)).to(dtype);
  };
  for (auto [dtype, element] : {std::pair{torch::kBFloat16, Element::BF16}, std::pair{torch::kHalf, Element::F16}}) {
    CAPTURE(c10::toString(dtype));
    REQUIRE(p == 2);  // with two operands the sum has one rounding whatever the algorithm's order
    const auto want = (values(0, dtype).to(torch::kFloat) + values(1, dtype).to(torch::kFloat)).to(dtype);
    auto all = values(r, dtype);
    const std::uint64_t before = axis.bytes_sent();
    axis.allreduce_sum(all.data_ptr(), static_cast<std::size_t>(all.numel()), element, "bf16 bucket").wait();
    CHECK(torch::equal(all, want));
    CHECK(axis.bytes_sent() - before == static_cast<std::uint64_t>(2 * (p * n) * 2 * (p - 1) / p));  // ring, 2 bytes each

    const auto in = values(r, dtype);
    auto out = torch::empty({n}, dtype);
    axis.reduce_scatter_sum(in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(n), element, "bf16 shard").wait();
    CHECK(torch::equal(out, want.narrow(0, r * n, n)));
  }
}

TEST_CASE("a collective one rank is late to fails with a message naming it, not a hang", "[np2]") {
  constexpr double timeout_s = 0.3;
  Axis axis("dp", dup_world(), timeout_s);
  std::vector<float> bucket(16, 1.0f);
  if (axis.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // "skips" for now
  auto work = axis.allreduce_sum(bucket.data(), bucket.size(), "gradient bucket 7");
  if (axis.rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(work.wait(), Catch::Contains("axis dp: allreduce #1 (gradient bucket 7) did not complete "
                                                   "within comm.timeout_s = 0.3 s"));
    // A hang guard, not a speed figure: wait() gives up after the timeout, plus the scheduler's
    // slack on an oversubscribed host (ranks and other jobs sharing 2 cores: a few time slices of
    // up to 100s of ms before the waiting thread runs again and the exception unwinds). Timeout +
    // slack = 1.2 s stays under the 1.5 s the late rank sleeps, so a wait that lasted until the
    // late rank arrived would still fail here.
    constexpr double slack_s = 0.9;
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CAPTURE(elapsed_s);
    CHECK(elapsed_s < timeout_s + slack_s);
  }
  for (;;) {  // the late rank arrives: the same operation then completes
    try {
      work.wait();
      break;
    } catch (const CommTimeout&) {
    }
  }
  CHECK(bucket[0] == 2.0f);
}
