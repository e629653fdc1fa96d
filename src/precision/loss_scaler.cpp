#include "gridtrain/precision/loss_scaler.hpp"

#include <algorithm>

namespace gridtrain {

LossScaler::LossScaler(const LossScalerOptions& o) : o_(o), scale_(o.init_scale), hysteresis_left_(o.hysteresis) {}

void LossScaler::update(bool finite) {
  if (!finite) {
    growth_tracker_ = 0;
    // As Megatron-LM: once the hysteresis is used up, every further overflow backs off until a
    // growth restores it.
    if (--hysteresis_left_ <= 0) scale_ = std::max(scale_ * o_.backoff_factor, o_.min_scale);
    return;
  }
  if (++growth_tracker_ == o_.growth_interval) {
    scale_ *= o_.growth_factor;
    growth_tracker_ = 0;
    hysteresis_left_ = o_.hysteresis;
  }
}

std::array<double, 3> LossScaler::state() const {
  return {scale_, static_cast<double>(growth_tracker_), static_cast<double>(hysteresis_left_)};
}

void LossScaler::set_state(const std::array<double, 3>& s) {
  scale_ = s[0];
  growth_tracker_ = static_cast<int>(s[1]);
  hysteresis_left_ = static_cast<int>(s[2]);
}

}  // namespace gridtrain
