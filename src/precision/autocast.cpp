#include "gridtrain/precision/autocast.hpp"

#include <ATen/autocast_mode.h>

namespace gridtrain {
torch::ScalarType compute_dtype(PrecisionType precision) {
  switch (precision) {
    case PrecisionType::Bf16: return torch::kBFloat16;
    case PrecisionType::Fp16: return torch::kHalf;
    case PrecisionType::Fp32: break;
  }
  return torch::kFloat;
}

AutocastGuard::AutocastGuard(torch::ScalarType d, torch::DeviceType type) : type_(type) {
  if (d == torch::kFloat) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, d);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost autocast region drops its cache of casted weights (they change each step).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
}

}  // namespace gridtrain
