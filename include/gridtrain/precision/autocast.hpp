// Mixed precision: autocast for the forward pass (precision.type), as torch.autocast does in
// Python. Matmuls and linear layers run in bf16 (CPU, CUDA) or fp16 (CUDA); parameters,
// gradients and optimizer state stay fp32, and the loss is computed in fp32 by the model.
#pragma once
#include <torch/torch.h>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

/// The compute dtype of precision.type: fp32 → kFloat, bf16 → kBFloat16, fp16 → kHalf.
torch::ScalarType compute_dtype(PrecisionType precision);

/// Enables autocast on device's type for its lifetime (no-op for fp32), restoring the previous
/// state after. Not copyable; nest freely.
class AutocastGuard {
 public:
  AutocastGuard(PrecisionType precision, const torch::Device& device)
      : AutocastGuard(compute_dtype(precision), device.type()) {}
  /// Autocast to dtype on devices of `type`; kFloat: none.
  AutocastGuard(torch::ScalarType dtype, torch::DeviceType type);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType type_;
  bool active_ = false, was_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat;
};

}  // namespace gridtrain
