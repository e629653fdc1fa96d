// Run under mpiexec -n 2 and -n 4: the bucketed reducer equals a plain allreduce.
#include <catch2/catch.hpp>

#include "gridtrain/parallel/reducer.hpp"

using namespace gridtrain;

TEST_CASE("reducer average equals a plain MPI_Allreduce for several bucket sizes", "[np2][np4]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Axis dp("dp", dup);
  // bucket_mb: smaller than any tensor, a few tensors, everything in one bucket.
  for (double bucket_mb : {1e-6, 0.004, 100.0}) {
    torch::manual_seed(1);
    std::vector<torch::Tensor> params = {torch::zeros({37, 11}).requires_grad_(), torch::zeros({5}).requires_grad_(),
                                         torch::zeros({64, 16}).requires_grad_(), torch::zeros({3, 3, 3}).requires_grad_()};
    Reducer reducer(params, dp, bucket_mb);
    reducer.zero_grad();
    std::vector<torch::Tensor> expected;
    for (auto& p : params) {
      auto g = torch::randn(p.sizes()) * (rank + 1);  // differs per rank
      (p * g).sum().backward();                      // accumulates g into the bucket view
      auto sum = g.clone();
      MPI_Allreduce(MPI_IN_PLACE, sum.data_ptr<float>(), static_cast<int>(sum.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      expected.push_back(sum / size);
    }
    reducer.allreduce();
    CAPTURE(bucket_mb);
    if (bucket_mb == 100.0) CHECK(reducer.bucket_count() == 1);
    if (bucket_mb == 1e-6) CHECK(reducer.bucket_count() == params.size());
    double sq = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      CHECK(torch::allclose(params[i].grad(), expected[i], 1e-6, 1e-6));
      sq += expected[i].to(torch::kFloat64).square().sum().item<double>();
    }
    CHECK(reducer.grad_norm() == Approx(std::sqrt(sq)).epsilon(1e-6));  // fp32 norms
  }
}
