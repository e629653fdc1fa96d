// Dynamic loss scaling for reduced-precision training (Micikevicius et al. 2018, "Mixed
// Precision Training"; the update rule of PyTorch's GradScaler plus Megatron-LM's hysteresis).
//
// The loss is multiplied by scale() before backward and the gradients by 1/scale() after the
// allreduce. update() takes the step's global finite flag (the same on every rank, so every rank
// changes its scale the same way):
//   overflow: the step is skipped; from the `hysteresis`-th overflow since the last growth on,
//             each overflow sets the scale to max(scale · backoff_factor, min_scale);
//   finite:   after growth_interval finite steps in a row the scale grows by growth_factor and
//             the hysteresis is restored.
#pragma once
#include <array>

namespace gridtrain {

struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;   ///< > 1
  double backoff_factor = 0.5;  ///< in (0, 1)
  int growth_interval = 1000;   ///< finite steps in a row before the scale grows
  int hysteresis = 2;           ///< overflows tolerated before the scale backs off
  double min_scale = 1.0;       ///< the scale never goes below this
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o);
  double scale() const { return scale_; }
  bool at_min() const { return scale_ <= o_.min_scale; }
  void update(bool finite);

  /// {scale, finite steps since the last change, overflows left before backoff}: checkpointed so
  /// that a resume continues with the same scale schedule.
  std::array<double, 3> state() const;
  void set_state(const std::array<double, 3>& s);

 private:
  LossScalerOptions o_;
  double scale_;
  int growth_tracker_ = 0;
  int hysteresis_left_;
};

}  // namespace gridtrain
