#include "gridtrain/plan/peak.hpp"

#include <array>
#include <cstdio>

#include <torch/torch.h>

#ifdef GRIDTRAIN_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "gridtrain/precision/autocast.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {
namespace {

// Dense peaks, TFLOP/s: {bf16/fp16 tensor cores, fp32 (no TF32)}, by the device name's part;
// the first match wins, so the PCIe/NVL parts come before the SXM ones of the same name.
struct DevicePeak {
  const char* name;
  double half, single;
};
constexpr std::array<DevicePeak, 6> kDevices = {{{"H100 PCIe", 756.0, 51.0},
                                                 {"H100 NVL", 835.0, 60.0},
                                                 {"H100", 989.0, 67.0},
                                                 {"H200", 989.0, 67.0},
                                                 {"A100", 312.0, 19.5},
                                                 {"L40S", 362.0, 91.6}}};

void synchronize(bool cuda) {
#ifdef GRIDTRAIN_CUDA
  if (cuda) torch::cuda::synchronize();
#else
  (void)cuda;
#endif
}

}  // namespace

double probe_matmul_gflops(PrecisionType precision, bool cuda, double min_seconds) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions(compute_dtype(precision)).device(cuda ? torch::kCUDA : torch::kCPU);
  auto time_one = [&](const torch::Tensor& a, const torch::Tensor& b) {
    synchronize(cuda);
    const Stopwatch clock;
    auto c = gemm(a, b);  // the linear layers' library (model.matmul), so MFU is against the kernels run
    synchronize(cuda);
    return clock.seconds();
  };
  std::int64_t n = 256;
  torch::Tensor a, b;
  for (;; n *= 2) {  // grow until one product is long enough to time
    a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
    time_one(a, b);  // warm-up: thread pool, BLAS buffers, kernels
    if (time_one(a, b) >= 0.05 || n >= 16384) break;
  }
  const double flop = 2.0 * static_cast<double>(n) * n * n;
  double best = 0.0;
  for (const Stopwatch total; total.seconds() < min_seconds;) best = std::max(best, flop / time_one(a, b) / 1e9);
#ifdef GRIDTRAIN_CUDA
  a = b = torch::Tensor();
  if (cuda) c10::cuda::CUDACachingAllocator::emptyCache();  // the probe's buffers are not the run's
#endif
  return best;
}

std::optional<double> datasheet_peak_tflops(const std::string& device, PrecisionType precision) {
  for (const auto& d : kDevices)
    if (device.find(d.name) != std::string::npos) return precision == PrecisionType::Fp32 ? d.single : d.half;
  return std::nullopt;
}

Peak rank_peak(const Config& c, bool cuda) {
  if (c.output.peak_gflops > 0) return {c.output.peak_gflops, "output.peak_gflops"};
  char what[160];
  if (cuda) {
#ifdef GRIDTRAIN_CUDA
    const std::string device = at::cuda::getCurrentDeviceProperties()->name;
    if (const auto tflops = datasheet_peak_tflops(device, c.precision.type)) {
      std::snprintf(what, sizeof what, "%s dense %s peak, datasheet", device.c_str(), name_of(c.precision.type));
      return {1e3 * *tflops, what};
    }
    std::snprintf(what, sizeof what, "%s not in the device table: %s matmul probe", device.c_str(),
                  name_of(c.precision.type));
    return {probe_matmul_gflops(c.precision.type, true), what};
#endif
  }
  std::snprintf(what, sizeof what, "%s matmul probe with this rank's threads", name_of(c.precision.type));
  return {probe_matmul_gflops(c.precision.type, false), what};
}

}  // namespace gridtrain
