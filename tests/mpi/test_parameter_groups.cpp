// Run under mpiexec -n 4: gradient reduction per parameter group. A "dense" group averages over
// all of dp and an "expert" group over half of it (an Axis::split of dp, as G22's
// expert-data-parallel group is), with and without ZeRO; the weighted Σ‖g‖² counts every
// element of every group once.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include <mpi.h>

#include "gridtrain/parallel/parameter_groups.hpp"

using namespace gridtrain;

namespace {

int world(int (*what)(MPI_Comm, int*)) {
  int n = 0;
  what(MPI_COMM_WORLD, &n);
  return n;
}

// Gradient of parameter i on rank r: every rank can compute every other rank's, so the expected
// averages below need no communication.
torch::Tensor grad_of(std::size_t i, int r, const torch::Tensor& p) {
  auto gen = at::detail::createCPUGenerator(1000 * i + r + 1);
  return at::randn(p.sizes(), gen);
}

// Parameter i's gradient summed over ranks first..first+n−1, divided by dp.
torch::Tensor sum_over(std::size_t i, int first, int n, int dp, const torch::Tensor& p) {
  auto sum = torch::zeros_like(p);
  for (int r = first; r < first + n; ++r) sum += grad_of(i, r, p);
  return sum / dp;
}

struct TwoGroups {
  const int rank = world(MPI_Comm_rank), size = world(MPI_Comm_size);
  MPI_Comm dup = [] { MPI_Comm c; MPI_Comm_dup(MPI_COMM_WORLD, &c); return c; }();
  Axis dp{"dp", dup};
  std::unique_ptr<Axis> half = dp.split(rank / 2, rank, "edp");  // ranks {0, 1} and {2, 3}
  // Fresh per ParameterGroups: ZeRO makes them views of its flat buckets.
  static std::vector<torch::Tensor> make_params() {
    return {torch::zeros({37, 11}).requires_grad_(), torch::zeros({64}).requires_grad_(),
            torch::zeros({5, 3}).requires_grad_(), torch::zeros({128}).requires_grad_()};
  }
  std::vector<torch::Tensor> params = make_params();
  std::vector<std::size_t> group_of = {0, 1, 0, 1};  // 0: dense, 1: expert
  std::vector<ParameterGroup> groups() { return {{"dense", &dp}, {"expert", half.get()}}; }
};

}  // namespace

// Every group's gradient is its sum over its own axis divided by dp (not by the axis's size): an
// expert's rows come from every ep rank's micro-batch (parameter_groups.hpp).
TEST_CASE("each parameter group sums its gradients over its own axis and divides by dp", "[np4]") {
  TwoGroups f;
  REQUIRE(f.size == 4);
  for (int stage : {0, 1, 2}) {
    for (bool overlap : {false, true}) {
      CAPTURE(stage, overlap);
      f.params = TwoGroups::make_params();
      ParameterGroups g(f.params, f.group_of, f.groups(), f.dp, 1e-6, overlap, Compression::None,
                        ZeroOptions{stage, {}, true});
      CHECK(g.size() == 2);
      CHECK(g.bucket_count() == 4);  // one per parameter at this bucket size, in whichever group
      g.zero_grad(false);
      g.begin_backward(true);
      for (std::size_t i = 0; i < f.params.size(); ++i) (f.params[i] * grad_of(i, f.rank, f.params[i])).sum().backward();
      g.finish();
      double expected_sq = 0;  // Σ over distinct elements: the dense gradient once, each half's expert gradient once
      for (std::size_t i = 0; i < f.params.size(); ++i) {
        const bool expert = f.group_of[i] == 1;
        const auto want = expert ? sum_over(i, f.rank / 2 * 2, 2, f.size, f.params[i]) : sum_over(i, 0, 4, f.size, f.params[i]);
        const auto have = g.reduced_gradient(i);
        // 1e-6: the allreduce adds the ranks' fp32 gradients in its own order, the reference in
        // rank order; 2–4 terms of order 1 differ by a few ulps (~1e-7). A wrong axis or weight
        // differs by order 1.
        if (stage == 0) {
          CHECK(torch::allclose(have, want, 1e-6, 1e-6));
        } else {  // this rank's piece of it
          const auto piece = g.shard_pieces()[i];
          CHECK(torch::allclose(have, want.flatten().narrow(0, piece.offset, have.numel()), 1e-6, 1e-6));
        }
        for (int h = 0; h < (expert ? 2 : 1); ++h)
          expected_sq += (expert ? sum_over(i, 2 * h, 2, f.size, f.params[i]) : want).to(torch::kDouble).square().sum().item<double>();
      }
      double sq = g.gradient_sq({0, 1, 2, 3}, torch::kCPU).item<double>();
      MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      // The step guard's convention: the sum over the grid counts every element dp times.
      // 1e-6 relative: fp32 norms combined in fp64, against fp64 sums of the fp32 gradients.
      CHECK(sq / f.size == Approx(expected_sq).epsilon(1e-6));
    }
  }
}

TEST_CASE("parameter groups refuse what they cannot reduce", "[np4]") {
  TwoGroups f;
  auto build = [&](std::vector<std::size_t> group_of, std::vector<ParameterGroup> groups, const Axis& dp, int stage) {
    ParameterGroups(f.params, group_of, std::move(groups), dp, 1.0, true, Compression::None, ZeroOptions{stage, {}, true});
  };
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(build({0, 1, 0}, f.groups(), f.dp, 0), Contains("3 group indices for 4 parameters"));
  CHECK_THROWS_WITH(build({0, 2, 0, 1}, f.groups(), f.dp, 0), Contains("names group 2 of 2"));
  CHECK_THROWS_WITH(build({0, 0, 0, 0}, f.groups(), f.dp, 0), Contains("group 'expert' is empty"));
  CHECK_THROWS_WITH(build(f.group_of, f.groups(), f.dp, 3), Contains("ZeRO stage 3"));
  // A group over all four ranks cannot sit inside a data-parallel axis of two.
  CHECK_THROWS_WITH(build({0, 0, 0, 0}, {{"dense", &f.dp}}, *f.half, 0), Contains("does not divide dp = 2"));
}
