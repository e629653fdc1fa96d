#include "gridtrain/precision/matmul.hpp"

#include <cpuid.h>

#include <cstring>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>

#include "gridtrain/precision/weight_grad_store.hpp"
#include "gridtrain/util/error.hpp"

namespace at::native {
// oneDNN's matmul: result = beta · result + alpha · (mat1 · mat2), fp32 in and out with fp32
// accumulation; strided (transposed) operands are read in place. libtorch_cpu exports it (its
// header, ATen/native/mkldnn/Matmul.h, is not among the installed ones); a LibTorch without it
// fails to link, not at run time.
extern TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result,
                                    float beta, float alpha);
}  // namespace at::native

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Why oneDNN's matmul cannot run here ("" when it can), found once by running it on a 2 × 2
// product. ATen's mkldnn_matmul refuses fp32 as well as bf16 unless oneDNN reports bf16 support
// (avx512bw/vl/dq or avx_ne_convert on x86; Matmul.cpp), so on an AVX2-only CPU (AMD EPYC Rome
// and Milan, Intel before Skylake-SP), or under ONEDNN_MAX_CPU_ISA=AVX2, it throws. Running it is
// the one test that agrees with ATen's check and oneDNN's ISA limit whatever their versions.
std::string probe_onednn() {
  if (!at::hasMKLDNN()) return "this LibTorch is built without oneDNN";
  try {
    const auto a = torch::ones({2, 2}), out = torch::empty({2, 2});
    at::native::mkldnn_matmul(a, a, out, 0.0f, 1.0f);
    return out.equal(torch::full({2, 2}, 2.0f)) ? "" : "its 2 x 2 probe computed a wrong product";
  } catch (const c10::Error& e) {
    return std::string("oneDNN's matmul refuses this CPU (") + e.what_without_backtrace() + ")";
  }
}

// Whether the CPU's vendor is Intel (CPUID leaf 0). MKL picks its kernels by vendor: its
// AVX-512 ones run on GenuineIntel only, AMD gets its AVX2 path (mkl_blas_def_sgemm_kernel_0_zen
// on an EPYC with AVX-512), which is what oneDNN's matmul, choosing by instruction set, beats
// (docs/performance.md). On Intel both libraries have the same instructions, and auto keeps
// PyTorch's own path.
bool intel_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "GenuineIntel") == 0;
}

// Why auto takes the BLAS here ("" when it takes oneDNN).
std::string auto_takes_blas() {
  if (!onednn_unavailable().empty()) return onednn_unavailable();
  static const bool intel = intel_cpu();
  return intel ? "an Intel CPU, where MKL runs its AVX-512 kernels itself" : "";
}

Matmul resolve(Matmul backend) {
  const std::string& why = onednn_unavailable();
  if (backend == Matmul::Auto) return auto_matmul();
  if (backend == Matmul::OneDnn && !why.empty())
    throw Error("model.matmul = onednn cannot run here: " + why + "; valid on this CPU: auto (which chooses blas "
                "here), blas");
  return backend;
}

// The library in effect; what a process that never sets it (a test, a bench) gets is auto's.
Matmul& backend() {
  static Matmul b = resolve(Matmul::Auto);
  return b;
}

bool onednn(const torch::Tensor& a, const torch::Tensor& b) {
  return backend() == Matmul::OneDnn && a.device().is_cpu() && a.scalar_type() == torch::kFloat &&
         b.scalar_type() == torch::kFloat && a.numel() > 0 && b.numel() > 0 &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

// out = a · b (2-D, fp32 CPU) by oneDNN; out holds the bias rows when accumulate.
torch::Tensor onednn_into(torch::Tensor out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate) {
  at::native::mkldnn_matmul(a, b, out, accumulate ? 1.0f : 0.0f, 1.0f);
  return out;
}

// a · b (2-D, fp32 CPU) by oneDNN, into a new (M, N) tensor.
torch::Tensor onednn_mm(const torch::Tensor& a, const torch::Tensor& b) {
  return onednn_into(torch::empty({a.size(0), b.size(1)}, a.options()), a, b, false);
}

// A linear whose three matmuls run in oneDNN: all = {x, W} or {x, W, b} (an undefined tensor may
// not be an autograd input). x is saved flattened to (M, K), as ATen's linear saves its input.
struct OneDnnLinear : torch::autograd::Function<OneDnnLinear> {
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList all) {
    const auto &x = all[0], &weight = all[1];
    const bool biased = all.size() == 3;
    const auto x2 = x.reshape({-1, x.size(-1)});  // (M, K)
    const auto M = x2.size(0), N = weight.size(0);
    // A new buffer even at M = 1, where the bias expanded to (1, N) counts as contiguous and
    // .contiguous() would hand back the parameter itself to accumulate into.
    auto y = torch::empty({M, N}, x.options());
    if (biased) y.copy_(all[2]);
    onednn_into(y, x2, weight.t(), biased);
    ctx->save_for_backward({x2, weight});
    ctx->saved_data["biased"] = biased;
    auto shape = x.sizes().vec();
    shape.back() = N;
    return y.view(shape);  // (..., N)
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &weight = saved[1];
    const auto dy = g[0].reshape({-1, weight.size(0)});  // (M, N)
    variable_list grads(ctx->saved_data["biased"].toBool() ? 3 : 2);
    if (ctx->needs_input_grad(0)) {
      auto shape = g[0].sizes().vec();
      shape.back() = weight.size(1);
      grads[0] = onednn_mm(dy, weight).view(shape);
    }
    if (ctx->needs_input_grad(1)) grads[1] = onednn_mm(dy.t(), x2);  // (N, K)
    if (grads.size() == 3 && ctx->needs_input_grad(2)) grads[2] = dy.sum(0);
    return grads;
  }
};

}  // namespace

const std::string& onednn_unavailable() {
  static const std::string why = probe_onednn();
  return why;
}

Matmul auto_matmul() { return auto_takes_blas().empty() ? Matmul::OneDnn : Matmul::Blas; }

void set_matmul_backend(Matmul requested) { backend() = resolve(requested); }

Matmul matmul_backend() { return backend(); }

std::string describe_matmul(Matmul requested) {
  const std::string chosen = name_of(matmul_backend());
  if (requested != Matmul::Auto) return chosen + " (model.matmul)";
  const std::string why = auto_takes_blas();
  return chosen + " (model.matmul = auto: " + (why.empty() ? "oneDNN's matmul runs on this CPU, where MKL's sgemm takes its AVX2 path" : why) + ")";
}

torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (WeightGradStore::current() && weight.requires_grad() && torch::GradMode::is_enabled())
    return deferred_linear(x, weight, bias);  // a zero-bubble schedule's split backward
  if (!onednn(x, weight) || (bias.defined() && bias.scalar_type() != torch::kFloat))
    return torch::nn::functional::linear(x, weight, bias);
  const auto all = bias.defined() ? variable_list{x, weight, bias} : variable_list{x, weight};
  return OneDnnLinear::apply(at::TensorList(all));  // a TensorList, which autograd records as inputs
}

torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b) {
  return onednn(a, b) ? onednn_mm(a, b) : a.mm(b);
}

}  // namespace gridtrain
