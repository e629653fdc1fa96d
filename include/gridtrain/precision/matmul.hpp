// The linear layers' matmuls on the CPU, by oneDNN or by the BLAS (model.matmul).
//
// Why: PyTorch eager's nn.Linear runs fp32 on the CPU through at::addmm, that is MKL's sgemm,
// and MKL picks its kernels by CPU vendor: on an AMD EPYC with AVX-512 it runs its AVX2 path
// (on Intel its AVX-512 one, so there auto keeps it).
// oneDNN, inside the same LibTorch, picks by instruction set, and its fp32 matmul ran the GPT's
// shapes 2.0-2.5× faster there (docs/performance.md). Both compute in fp32 with fp32
// accumulation (not TF32, not bf16): results differ from MKL's in rounding only.
#pragma once
#include <string>

#include <torch/types.h>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

/// Why oneDNN's fp32 matmul cannot run in this process ("" when it can): a LibTorch without
/// oneDNN, or a CPU oneDNN does not report bf16 support on (no AVX-512 BW/VL/DQ nor AVX-NE-CONVERT,
/// or ONEDNN_MAX_CPU_ISA below them), which ATen's mkldnn_matmul refuses even for fp32. Found
/// once, by running it, at the first call.
const std::string& onednn_unavailable();
/// What model.matmul = auto takes on this CPU: oneDNN where it runs (onednn_unavailable() is
/// empty) and the CPU is not Intel's; the BLAS elsewhere, since MKL runs AVX-512 kernels on Intel
/// CPUs only (on AMD it takes its AVX2 path, which oneDNN's matmul beats 2-2.5× on the GPT's shapes).
Matmul auto_matmul();
/// The library for fp32 CPU linears from now on in this process: auto = auto_matmul(). Set once
/// at setup, before any model runs.
/// Throws gridtrain::Error for Matmul::OneDnn where oneDNN's matmul cannot run, naming the key,
/// why, and what is valid.
void set_matmul_backend(Matmul requested);
/// The library in effect: Matmul::OneDnn or Matmul::Blas (never Auto).
Matmul matmul_backend();
/// The log's line for the library in effect, given what the deck asked for: "blas (model.matmul
/// = auto: oneDNN's matmul refuses this CPU (...))".
std::string describe_matmul(Matmul requested);

/// y = x Wᵀ + b, differentiable: x (..., K), weight (N, K), bias (N,) or undefined → (..., N).
/// fp32 CPU tensors outside autocast go to the chosen library for the forward and for the
/// backward's dX = dY W and dW = dYᵀ X; anything else (CUDA, bf16/fp16 under autocast) is
/// torch::nn::functional::linear. While a WeightGradStore is open (zero-bubble pipeline
/// schedules), a linear with a weight that needs a gradient is deferred_linear instead.
torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

/// a · b for 2-D a (M, K) and b (K, N), any strides (transposed views included), by the same
/// rule; not differentiable (for custom backward passes and the matmul probe).
torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace gridtrain
