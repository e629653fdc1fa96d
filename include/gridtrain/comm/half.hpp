// 2-byte floating point on host buffers: conversions from and to fp32 for bfloat16 and IEEE
// binary16 (round to nearest even; NaN stays NaN), and the elementwise sums that the MPI backend
// of Axis applies to 2-byte gradients (precision.weights = bf16 | fp16), computed in fp32 and
// rounded once per pair, as NCCL's bf16/fp16 reductions do. Written to auto-vectorize (AVX2
// clones where the CPU has them). The values are passed as their bit patterns (std::uint16_t).
#pragma once
#include <cstddef>
#include <cstdint>

namespace gridtrain {

void to_bf16(const float* x, std::size_t n, std::uint16_t* out);
void from_bf16(const std::uint16_t* h, std::size_t n, float* out);
void to_fp16(const float* x, std::size_t n, std::uint16_t* out);
void from_fp16(const std::uint16_t* h, std::size_t n, float* out);

/// inout[i] ← round(in[i] + inout[i]) for n bfloat16 values.
void sum_bf16(const std::uint16_t* in, std::uint16_t* inout, std::size_t n);
/// inout[i] ← round(in[i] + inout[i]) for n IEEE half values.
void sum_fp16(const std::uint16_t* in, std::uint16_t* inout, std::size_t n);

}  // namespace gridtrain
