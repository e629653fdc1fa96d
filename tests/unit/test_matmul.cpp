// precision/matmul: dense(x, W, b) and gemm(a, b) with each model.matmul library against a float64
// reference: values and the gradients of x, W and b, with and without bias, for a (B, T, C)
// input and a transposed one; and ATen's own linear wherever oneDNN's path does not apply.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include <cstdlib>
#include <string>

#include "gridtrain/precision/matmul.hpp"

using namespace gridtrain;

namespace {

// Restores the process-wide library when a test ends.
struct BackendGuard {
  explicit BackendGuard(Matmul m) : saved(matmul_backend()) { set_matmul_backend(m); }
  ~BackendGuard() { set_matmul_backend(saved); }
  Matmul saved;
};

struct Grads {
  torch::Tensor y, dx, dw, db;
  std::string node;  // the autograd node that made y
  bool bias_intact;  // the forward read the bias and did not write it
};

Grads run(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& dy, bool biased) {
  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto y = dense(x, w, biased ? b : torch::Tensor());
  const std::string node = y.grad_fn() ? y.grad_fn()->name() : "";
  const bool bias_intact = torch::equal(b.detach(), b0);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), biased ? b.grad() : torch::Tensor(), node, bias_intact};
}

// max |a − ref| / max |ref|: fp32 with K ≤ 512 terms stays far below 1e-5.
double relative(const torch::Tensor& a, const torch::Tensor& ref) {
  return ((a.to(torch::kDouble) - ref).abs().max() / ref.abs().max()).item<double>();
}

// oneDNN where it runs on this CPU, else the BLAS.
Matmul onednn_or_blas() { return onednn_unavailable().empty() ? Matmul::OneDnn : Matmul::Blas; }

}  // namespace

TEST_CASE("dense computes x·Wᵀ + b and its gradients with either library", "[matmul]") {
  const auto backend = GENERATE(onednn_or_blas(), Matmul::Blas);  // both where oneDNN runs
  const bool biased = GENERATE(true, false);
  const int layout = GENERATE(0, 1, 2);  // contiguous, a transposed view, a narrowed (strided) view
  const BackendGuard guard(backend);
  torch::manual_seed(7);
  // Odd sizes (no kernel's block fits exactly), and one token (M = 1: generation with a KV cache).
  const auto [B, T] = GENERATE(std::pair<std::int64_t, std::int64_t>{3, 37}, std::pair<std::int64_t, std::int64_t>{1, 1});
  const std::int64_t K = 67, N = 45;
  auto x = layout == 0 ? torch::randn({B, T, K})
           : layout == 1 ? torch::randn({B, K, T}).transpose(1, 2)
                         : torch::randn({B, T + 5, K + 3}).narrow(1, 2, T).narrow(2, 1, K);  // (B, T, K)
  const auto w = torch::randn({N, K}), b = torch::randn({N}), dy = torch::randn({B, T, N});
  const auto got = run(x, w, b, dy, biased);
  CHECK(got.bias_intact);

  const auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble), dyd = dy.to(torch::kDouble);
  auto y_ref = torch::matmul(xd, wd.t());
  if (biased) y_ref = y_ref + b.to(torch::kDouble);
  CHECK(got.y.sizes() == y_ref.sizes());
  CHECK(relative(got.y, y_ref) < 1e-6);
  CHECK(relative(got.dx, torch::matmul(dyd, wd)) < 1e-6);
  CHECK(relative(got.dw, dyd.reshape({-1, N}).t().mm(xd.reshape({-1, K}))) < 1e-6);
  if (biased) CHECK(relative(got.db, dyd.reshape({-1, N}).sum(0)) < 1e-6);
  // Which path ran: oneDNN's function where LibTorch has oneDNN, ATen's addmm/mm otherwise.
  if (matmul_backend() == Matmul::OneDnn) CHECK(got.node.find("OneDnnLinear") != std::string::npos);
  else CHECK(got.node.find("OneDnnLinear") == std::string::npos);
}

TEST_CASE("dense leaves non-fp32 inputs and autocast to ATen's linear", "[matmul]") {
  const BackendGuard guard(onednn_or_blas());
  const auto x = torch::randn({4, 8}, torch::kDouble).requires_grad_(true), w = torch::randn({5, 8}, torch::kDouble);
  const auto y = dense(x, w);
  CHECK(y.grad_fn()->name().find("OneDnnLinear") == std::string::npos);
  CHECK(torch::allclose(y, x.mm(w.t())));
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    const auto xf = torch::randn({4, 8}).requires_grad_(true);
    const auto yb = dense(xf, torch::randn({5, 8}));
    at::autocast::set_autocast_enabled(at::kCPU, false);
    CHECK(yb.scalar_type() == torch::kBFloat16);  // autocast's dtype: ATen's linear ran under it
  }
}

TEST_CASE("gemm multiplies strided 2-D operands like at::mm", "[matmul]") {
  const auto backend = GENERATE(onednn_or_blas(), Matmul::Blas);
  const BackendGuard guard(backend);
  torch::manual_seed(3);
  const auto a = torch::randn({53, 29}).t(), b = torch::randn({53, 31});  // (29, 53) transposed view, (53, 31)
  const auto c = gemm(a, b);
  CHECK(c.sizes() == std::vector<std::int64_t>{29, 31});
  CHECK(relative(c, a.to(torch::kDouble).mm(b.to(torch::kDouble))) < 1e-6);
}

TEST_CASE("model.matmul = auto chooses a library that runs here; onednn is refused where it cannot run", "[matmul]") {
  const BackendGuard guard(Matmul::Auto);
  CHECK(matmul_backend() == auto_matmul());
  CHECK_THAT(describe_matmul(Matmul::Auto), Catch::StartsWith(name_of(auto_matmul())));
  if (!onednn_unavailable().empty()) CHECK(auto_matmul() == Matmul::Blas);  // never one that cannot run
  // Capped at AVX2 (the CI step that takes the path of a CPU without AVX-512), oneDNN reports no
  // bf16 support, and ATen's mkldnn_matmul refuses fp32 too: the probe must find that.
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa && std::string(isa) == "AVX2") CHECK_THAT(onednn_unavailable(), Catch::Contains("refuses this CPU"));
  if (onednn_unavailable().empty()) {
    CHECK_NOTHROW(set_matmul_backend(Matmul::OneDnn));
  } else {
    CHECK_THAT(describe_matmul(Matmul::Auto), Catch::Contains("blas (model.matmul = auto: "));
    CHECK_THROWS_WITH(set_matmul_backend(Matmul::OneDnn),
                      Catch::Contains("model.matmul = onednn cannot run here: ") && Catch::Contains("valid on this CPU"));
  }
}
