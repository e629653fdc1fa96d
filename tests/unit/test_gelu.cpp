// The fused GELU (model/gelu) against ATen's gelu(x, "tanh") and its autograd backward: values
// and gradients over the whole range a GELU sees, NaN and Inf carried through, and ATen itself
// wherever the fused kernels do not apply.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include <limits>

#include "gridtrain/model/gelu.hpp"

using namespace gridtrain;

namespace {

// x: 4,103 values (not a multiple of 8, so the scalar tail runs too) spread over [−12, 12], zero
// and values either side of it, and far out, where σ under- and overflows, in both paths.
torch::Tensor samples() {
  const auto far = torch::tensor({-200.0f, 200.0f});
  auto x = torch::cat({far, torch::linspace(-12.0, 12.0, 4096), torch::tensor({0.0f, 1e-20f, -1e-20f}), far});
  return x.to(torch::kFloat);
}

struct ValueAndGrad {
  torch::Tensor y, dx;
};

template <class F>
ValueAndGrad run(const torch::Tensor& x0, const torch::Tensor& dy, F f) {
  auto x = x0.clone().requires_grad_(true);
  auto y = f(x);
  y.backward(dy);
  return {y.detach(), x.grad()};
}

}  // namespace

TEST_CASE("fused GELU computes ATen's gelu(x, tanh) and its gradient", "[gelu]") {
  const auto x = samples();
  const auto dy = torch::randn(x.sizes(), torch::TensorOptions().dtype(torch::kFloat));
  const auto ours = run(x, dy, gelu_tanh);
  const auto aten = run(x, dy, [](const torch::Tensor& t) { return torch::gelu(t, "tanh"); });
  // gelu(x) = x·s with s in [0, 1]: the error is in s, so it is bounded relative to |x|.
  CHECK(((ours.y - aten.y).abs() / x.abs().clamp_min(1e-30)).max().item<float>() <= 1e-6f);
  // gelu' is bounded (|gelu'| < 1.13): absolute, scaled by the incoming gradient.
  CHECK(((ours.dx - aten.dx).abs() / dy.abs().clamp_min(1e-30)).max().item<float>() <= 2e-6f);
  if (fused_gelu_available()) CHECK_FALSE(torch::equal(ours.y, aten.y));  // the fused kernel ran, not ATen's
}

TEST_CASE("fused GELU carries NaN and Inf through, forward and backward", "[gelu]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto x = torch::tensor({nan, inf, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, nan});  // a vector of 8, then the tail
  const auto got = run(x, torch::ones_like(x), gelu_tanh);
  CHECK(std::isnan(got.y[0].item<float>()));
  CHECK(std::isnan(got.y[8].item<float>()));
  CHECK(got.y[1].item<float>() == inf);
  CHECK(std::isnan(got.dx[0].item<float>()));
  CHECK(std::isnan(got.dx[8].item<float>()));
  const auto dy_nan = torch::full_like(x, nan);
  CHECK(run(x, dy_nan, gelu_tanh).dx.isnan().all().item<bool>());
}

TEST_CASE("GELU on input the fused kernels do not take is ATen's", "[gelu]") {
  const auto x = samples().reshape({-1, 1}).expand({-1, 2});  // not contiguous
  CHECK(torch::equal(gelu_tanh(x), torch::gelu(x, "tanh")));
  const auto xd = samples().to(torch::kDouble);
  CHECK(torch::equal(gelu_tanh(xd), torch::gelu(xd, "tanh")));
}
