// The Axis element type (comm/axis.hpp) of a tensor's dtype, for the sums over gradient
// buffers: fp32, or the 2-byte gradients of precision.weights = bf16 | fp16.
#pragma once
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

/// Throws std::invalid_argument for a dtype other than fp32, bf16 and fp16.
inline Element element_of(const torch::Tensor& t) {
  const auto type = t.scalar_type();
  if (type == torch::kFloat) return Element::F32;
  if (type == torch::kBFloat16) return Element::BF16;
  if (type == torch::kHalf) return Element::F16;
  throw std::invalid_argument(std::string("no sum over an axis for dtype ") + c10::toString(type));
}

}  // namespace gridtrain
