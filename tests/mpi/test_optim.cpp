// AdamW against its definition (Loshchilov & Hutter 2019; torch.optim.AdamW), element by element
// in fp64 over 10 steps, with weight decay on the >= 2-D weight only; and where the LibTorch has
// them, the _foreach_ (>= 2.0) and _fused_adamw_ (>= 2.4) paths against the per-tensor path.
#include <catch2/catch.hpp>

#include <cmath>

#include "../support/training.hpp"
#include "gridtrain/optim/adamw.hpp"

using namespace gridtrain;
using test::rel;

namespace {

constexpr double kB1 = 0.9, kB2 = 0.95, kEps = 1e-8, kWd = 0.1;

std::vector<NamedParameter> fresh_params() {
  torch::manual_seed(3);
  return {{"w", torch::randn({7, 5})}, {"b", torch::randn({5})}};
}

// The gradient of step t (1-based) for parameter i: fixed pseudo-random values.
torch::Tensor grad_of(int t, std::size_t i, const torch::Tensor& p) {
  torch::manual_seed(100 * t + static_cast<int>(i));
  return torch::randn(p.sizes());
}

std::vector<torch::Tensor> run(AdamKernels kernels, int steps) {
  auto params = fresh_params();
  for (auto& p : params) p.param.mutable_grad() = torch::zeros_like(p.param);
  AdamW opt(params, kB1, kB2, kEps, kWd, kernels);
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].param.mutable_grad().copy_(grad_of(t, i, params[i].param));
    opt.step(1e-2 * t);  // a changing LR, as a schedule gives
  }
  return {params[0].param.clone(), params[1].param.clone()};
}

}  // namespace

TEST_CASE("AdamW follows its definition for 10 steps, weight decay on matrices only", "[np2]") {
  const auto kernels = GENERATE(AdamKernels::MultiTensor, AdamKernels::Fused);
  CAPTURE(kernels == AdamKernels::Fused);
  const auto got = run(kernels, 10);
  auto params = fresh_params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    auto p = params[i].param.to(torch::kDouble);
    auto m = torch::zeros_like(p), v = torch::zeros_like(p);
    for (int t = 1; t <= 10; ++t) {
      const double lr = 1e-2 * t;
      const auto g = grad_of(t, i, params[i].param).to(torch::kDouble);
      if (p.dim() >= 2) p = p * (1 - lr * kWd);
      m = kB1 * m + (1 - kB1) * g;
      v = kB2 * v + (1 - kB2) * g * g;
      p = p - lr / (1 - std::pow(kB1, t)) * m / (v.sqrt() / std::sqrt(1 - std::pow(kB2, t)) + kEps);
    }
    REQUIRE(got.size() == params.size());
    CHECK(rel(got[i], p) <= 1e-6);
  }
}
