// Learning-rate schedule: linear warmup that is already > 0 at step 0, then decay to min_lr.
//
//   peak = lr                                          (scale_lr = none)
//        = lr · global_batch / reference_batch         (scale_lr = linear; Goyal et al. 2017,
//                                                       "Accurate, Large Minibatch SGD")
//   s < W:          lr(s) = peak · (s + 1) / W          (W = warmup_steps; lr(0) = peak / W > 0,
//                                                       lr(W - 1) = peak)
//   W <= s < D:     p = (s - W) / (D - W),  D = decay_steps (or train.steps when 0)
//                   cosine:   min + (peak - min) · (1 + cos(π p)) / 2
//                   linear:   min + (peak - min) · (1 - p)
//                   constant: peak
//   s >= D:         min_lr (cosine, linear) or peak (constant)
//
// The seed article's warmup started at lr 0, which wastes the first step; (s + 1) / W does not.
#pragma once
#include "gridtrain/config/config.hpp"

namespace gridtrain {

class LrSchedule {
 public:
  /// Reads optim.{lr,min_lr,warmup_steps,schedule,decay_steps,scale_lr,reference_batch} and
  /// train.{steps,global_batch}. The config has been validated.
  explicit LrSchedule(const Config& c);
  /// Learning rate of optimizer step s (0-based).
  double operator()(long long s) const;
  double peak() const { return peak_; }

 private:
  double peak_, min_;
  long long warmup_, decay_;
  LrDecay kind_;
};

}  // namespace gridtrain
