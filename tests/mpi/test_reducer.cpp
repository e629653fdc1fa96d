// Run under mpiexec -n 2 and -n 4: the bucketed, overlapped reducer equals a plain allreduce.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include "gridtrain/parallel/data_parallel.hpp"

using namespace gridtrain;

namespace {

struct Fixture {
  int rank = 0, size = 1;
  MPI_Comm dup = MPI_COMM_NULL;
  Fixture() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  }
};

std::vector<torch::Tensor> make_params() {
  return {torch::zeros({37, 11}).requires_grad_(), torch::zeros({5}).requires_grad_(),
          torch::zeros({64, 16}).requires_grad_(), torch::zeros({3, 3, 3}).requires_grad_()};
}

// Gradient of parameter i on this rank (differs per rank and per micro-batch).
torch::Tensor grad_of(std::size_t i, int rank, int micro, const torch::Tensor& p) {
  auto gen = at::detail::createCPUGenerator(1000 * i + 10 * rank + micro);
  return at::randn(p.sizes(), gen);
}

// The plain answer: MPI_Allreduce of the summed gradients, / size.
torch::Tensor plain_average(torch::Tensor local, int size) {
  auto sum = local.clone();
  MPI_Allreduce(MPI_IN_PLACE, sum.data_ptr<float>(), static_cast<int>(sum.numel()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  return sum / size;
}

// Whether t holds the same values on every rank (elementwise min == max).
bool same_on_all_ranks(const torch::Tensor& t) {
  auto lo = t.clone(), hi = t.clone();
  MPI_Allreduce(MPI_IN_PLACE, lo.data_ptr<float>(), static_cast<int>(lo.numel()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, hi.data_ptr<float>(), static_cast<int>(hi.numel()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  return torch::equal(lo, hi);
}

}  // namespace

TEST_CASE("reducer equals a plain allreduce for several bucket sizes, in any arrival order", "[np2][np4]") {
  Fixture f;
  Axis dp("dp", f.dup);
  // bucket_mb: smaller than any tensor, a few tensors, everything in one bucket.
  for (double bucket_mb : {1e-6, 0.004, 100.0}) {
    for (bool overlap : {false, true}) {
      CAPTURE(bucket_mb, overlap);
      auto params = make_params();
      DataParallel data_parallel(params, dp, bucket_mb, overlap);
      Reducer& reducer = data_parallel.reducer();
      if (bucket_mb == 100.0) CHECK(reducer.bucket_count() == 1);
      if (bucket_mb == 1e-6) CHECK(reducer.bucket_count() == params.size());
      reducer.zero_grad();
      reducer.begin_backward(/*last=*/true);
      // Each rank lets its gradients arrive in its own order (one backward per parameter).
      std::vector<std::size_t> order(params.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(f.rank + 7));
      for (auto i : order) (params[i] * grad_of(i, f.rank, 0, params[i])).sum().backward();
      if (overlap) CHECK(reducer.buckets_started() == reducer.bucket_count());  // all started during backward
      if (!overlap) CHECK(reducer.buckets_started() == 0);
      reducer.finish();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const auto expected = plain_average(grad_of(i, f.rank, 0, params[i]), f.size);
        // Allreduce algorithms may add in different orders: equal to rounding, and bitwise equal
        // on all ranks.
        CHECK(torch::allclose(params[i].grad(), expected, 1e-6, 1e-6));
        CHECK(same_on_all_ranks(params[i].grad()));
      }
    }
  }
}

TEST_CASE("with accumulation only the last micro-batch communicates", "[np2]") {
  Fixture f;
  Axis dp("dp", f.dup);
  auto params = make_params();
  DataParallel data_parallel(params, dp, 0.004, /*overlap=*/true);
  Reducer& reducer = data_parallel.reducer();
  const std::uint64_t before = dp.bytes_sent();  // every byte is counted on the axis it is sent on
  reducer.zero_grad();
  for (int micro = 0; micro < 3; ++micro) {
    const bool last = micro == 2;
    reducer.begin_backward(last);
    for (std::size_t i = 0; i < params.size(); ++i) (params[i] * grad_of(i, f.rank, micro, params[i])).sum().backward();
    if (!last) {
      CHECK(reducer.buckets_started() == 0);
      CHECK(dp.bytes_sent() == before);
    }
  }
  reducer.finish();
  std::uint64_t expected_bytes = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto local = grad_of(i, f.rank, 0, params[i]) + grad_of(i, f.rank, 1, params[i]) + grad_of(i, f.rank, 2, params[i]);
    CHECK(torch::allclose(params[i].grad(), plain_average(local, f.size), 1e-6, 1e-6));
    expected_bytes += 2 * (f.size - 1) * params[i].numel() * 4 / f.size;
  }
  CHECK(dp.bytes_sent() - before == Approx(static_cast<double>(expected_bytes)).epsilon(0.01));
}

TEST_CASE("compressed buckets average within the format's rounding and stay identical on all ranks", "[np2][np4]") {
  Fixture f;
  Axis dp("dp", f.dup);
  for (auto compression : {Compression::Fp16, Compression::Bf16}) {
    CAPTURE(name_of(compression));
    auto params = make_params();
    DataParallel data_parallel(params, dp, 0.004, /*overlap=*/true, compression);
    Reducer& reducer = data_parallel.reducer();
    const std::uint64_t before = dp.bytes_sent();
    reducer.zero_grad();
    reducer.begin_backward(true);
    for (std::size_t i = 0; i < params.size(); ++i) (params[i] * grad_of(i, f.rank, 0, params[i])).sum().backward();
    CHECK(reducer.buckets_started() == 0);  // compression disables the overlap the deck asked for ...
    reducer.finish();
    CHECK_FALSE(reducer.overlaps());        // ... and the reducer says so
    CHECK(reducer.exchange() == GradExchange::Compressed);
    CHECK(reducer.stats().steps[static_cast<std::size_t>(GradExchange::Compressed)] == 1);
    CHECK(dp.bytes_sent() > before);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto expected = plain_average(grad_of(i, f.rank, 0, params[i]), f.size);
      CHECK(((params[i].grad() - expected).norm() / expected.norm()).item<double>() < 1e-2);
      CHECK(same_on_all_ranks(params[i].grad()));
    }
  }
}

TEST_CASE("a step handed to the optimizer keeps its gradients local and is reported as such", "[np2]") {
  Fixture f;
  Axis dp("dp", f.dup);
  auto params = make_params();
  DataParallel data_parallel(params, dp, 0.004, /*overlap=*/true);
  Reducer& reducer = data_parallel.reducer();
  const std::uint64_t before = dp.bytes_sent();
  CHECK(reducer.overlaps());
  reducer.zero_grad(/*local_gradients=*/true);
  reducer.begin_backward(true);
  for (std::size_t i = 0; i < params.size(); ++i) (params[i] * grad_of(i, f.rank, 0, params[i])).sum().backward();
  CHECK(reducer.buckets_started() == 0);
  reducer.finish();
  CHECK(reducer.exchange() == GradExchange::Local);
  CHECK(dp.bytes_sent() == before);
  for (std::size_t i = 0; i < params.size(); ++i)
    CHECK(torch::equal(params[i].grad(), grad_of(i, f.rank, 0, params[i])));  // this rank's own
  reducer.zero_grad();  // the next step exchanges again
  CHECK(reducer.exchange() == GradExchange::Overlapped);
  const auto& steps = reducer.stats().steps;
  CHECK(steps[static_cast<std::size_t>(GradExchange::Local)] == 1);
}
