// GELU with the tanh approximation (Hendrycks & Gimpel 2016, GPT-2's activation), as one fused
// CPU kernel for the forward and one for the backward.
//
//   gelu(x) = 0.5 x (1 + tanh(z)),  z = √(2/π) (x + 0.044715 x³)
//           = x σ(2z)                     (0.5 (1 + tanh z) = σ(2z), σ the logistic function)
//   gelu'(x) = s + x s (1 − s) · 2√(2/π) (1 + 3 · 0.044715 x²),  s = σ(2z)
//
// Why: ATen's gelu and gelu_backward each evaluate tanh (SLEEF, 1 ulp), the most expensive part
// of the MLP outside its two matmuls (about 8 % of a step of the main deck's model on one CPU
// thread). The logistic form needs one exp instead, and the backward recomputes s from x, so
// the autograd graph keeps only x, as ATen's does: the activation memory is unchanged.
#pragma once
#include <torch/types.h>

namespace gridtrain {

/// gelu(x) with the tanh approximation, differentiable (same values as torch::gelu(x, "tanh") to
/// a few ulp; NaN and ±Inf propagate). x: any shape. The fused kernels run for contiguous fp32
/// CPU tensors on a CPU with AVX2 and FMA; anything else (CUDA, bf16 under autocast, an older
/// CPU) runs ATen's gelu, so the result never depends on where it ran beyond rounding.
torch::Tensor gelu_tanh(const torch::Tensor& x);

/// Whether gelu_tanh's fused CPU kernels are used on this CPU (AVX2 and FMA).
bool fused_gelu_available();

}  // namespace gridtrain
