#include "gridtrain/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

LrSchedule::LrSchedule(const Config& c)
    : peak_(c.optim.scale_lr == LrScaling::Linear
                ? c.optim.lr * c.train.global_batch / static_cast<double>(c.optim.reference_batch)
                : c.optim.lr),
      min_(c.optim.min_lr),
      warmup_(c.optim.warmup_steps),
      decay_(c.optim.decay_steps > 0 ? c.optim.decay_steps : c.train.steps),
      kind_(c.optim.schedule) {}

double LrSchedule::operator()(long long s) const {
  if (s < warmup_) return peak_ * static_cast<double>(s + 1) / static_cast<double>(warmup_);
  if (kind_ == LrDecay::Constant) return peak_;
  if (s >= decay_) return min_;
  const double p = static_cast<double>(s - warmup_) / static_cast<double>(std::max(1LL, decay_ - warmup_));
  if (kind_ == LrDecay::Linear) return min_ + (peak_ - min_) * (1.0 - p);
  return min_ + (peak_ - min_) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace gridtrain
