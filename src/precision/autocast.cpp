#include "gridtrain/precision/autocast.hpp"

#include <ATen/autocast_mode.h>

namespace gridtrain {
namespace {

// LibTorch 2.x takes the device type; 1.x has one function per device.
#if TORCH_VERSION_MAJOR >= 2
bool enabled(torch::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void set_enabled(torch::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
torch::ScalarType dtype(torch::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void set_dtype(torch::DeviceType t, torch::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool enabled(torch::DeviceType t) { return t == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void set_enabled(torch::DeviceType t, bool on) {
  t == torch::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
torch::ScalarType dtype(torch::DeviceType t) {
  return t == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(torch::DeviceType t, torch::ScalarType d) {
  t == torch::kCUDA ? at::autocast::set_autocast_gpu_dtype(d) : at::autocast::set_autocast_cpu_dtype(d);
}
#endif

}  // namespace

torch::ScalarType compute_dtype(PrecisionType precision) {
  switch (precision) {
    case PrecisionType::Bf16: return torch::kBFloat16;
    case PrecisionType::Fp16: return torch::kHalf;
    case PrecisionType::Fp32: break;
  }
  return torch::kFloat;
}

AutocastGuard::AutocastGuard(PrecisionType precision, const torch::Device& device) : type_(device.type()) {
  const auto d = compute_dtype(precision);
  if (d == torch::kFloat) return;
  active_ = true;
  was_enabled_ = enabled(type_);
  previous_dtype_ = dtype(type_);
  set_dtype(type_, d);
  set_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost autocast region drops its cache of casted weights (they change each step).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(type_, was_enabled_);
  set_dtype(type_, previous_dtype_);
}

}  // namespace gridtrain
