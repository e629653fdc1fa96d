// This rank's peak FLOP/s, the denominator of MFU.
//
//   output.peak_gflops > 0   that value;
//   CUDA                     the device's dense peak for the run's precision from a table of
//                            data-center GPUs (NVIDIA datasheets: H100 SXM/PCIe/NVL, H200, A100,
//                            L40S; no sparsity, fp32 without TF32, which LibTorch leaves off for
//                            matmuls), else a probe on the device;
//   CPU                      a matmul probe at the run's precision (fp32, or bf16 for bf16 runs)
//                            with the run's threads, growing the size until one product takes
//                            50 ms and repeating it for at least 0.3 s: the best rate it sees.
// A short probe under-measures (turbo, caches, a noisy neighbour) and a run then shows MFU > 100 %;
// this one does not stop before it is stable.
#pragma once
#include <optional>
#include <string>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

struct Peak {
  double gflops = 0;   ///< per rank, GFLOP/s
  std::string source;  ///< what it came from, for the log and the summary
};

/// The peak of a rank training on its CUDA device (cuda; call it once the rank has one) or the
/// CPU, at c.precision.type. In a CPU build cuda is ignored.
Peak rank_peak(const Config& c, bool cuda);

/// The dense datasheet peak, TFLOP/s, at `precision` (bf16/fp16 tensor cores, or fp32 without
/// TF32) of the GPU whose name contains a table entry (H100 PCIe, H100 NVL, H100, H200, A100,
/// L40S; the first match wins); nullopt for other devices.
std::optional<double> datasheet_peak_tflops(const std::string& device, PrecisionType precision);

/// Best GFLOP/s of an n×n×n matrix product in `precision` on the CPU or the current CUDA device,
/// n doubling from 256 until one product takes >= 50 ms, then repeated for >= min_seconds.
double probe_matmul_gflops(PrecisionType precision, bool cuda, double min_seconds = 0.3);

}  // namespace gridtrain
