// AdamW, and the Adam slot and update it shares with 1-bit Adam.
#pragma once
#include <span>
#include <vector>

#include "gridtrain/optim/optimizer.hpp"

namespace gridtrain {

/// One parameter's Adam state; shared by AdamW and OnebitAdam.
struct AdamSlot {
  NamedParameter p;
  torch::Tensor exp_avg, exp_avg_sq;  // shaped like p
  bool decay;                         // >= 2-D weights only
};

/// How AdamW::step runs, the same arithmetic either way: ATen's multi-tensor _foreach_* kernels, a
/// few launches for all parameters; or ATen's _fused_adamw_, one pass over each tensor for the whole
/// update (the split helpers below are always multi-tensor).
enum class AdamKernels { MultiTensor, Fused };
/// The faster for parameters on a GPU (cuda = true: Fused) or the CPU (MultiTensor).
AdamKernels default_adam_kernels(bool cuda = false);

/// m ← β1 m + (1 − β1) g (as lerp) and, with second_moment, v ← β2 v + (1 − β2) g², for every slot.
void adam_moments(std::span<AdamSlot> slots, double beta1, double beta2, bool second_moment);
/// p ← p·(1 − lr·wd) − lr/bc1 · m / (sqrt(v)/bc2_sqrt + ε) for every slot (wd on decay slots only),
/// given the bias corrections bc1 = 1 − β1^t, bc2_sqrt = sqrt(1 − β2^t).
void adam_apply(std::span<AdamSlot> slots, double lr, double bc1, double bc2_sqrt, double eps, double weight_decay);
/// "<param>/exp_avg" and "<param>/exp_avg_sq" of every slot.
std::vector<NamedParameter> adam_state(std::vector<AdamSlot>& slots);

/// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"), the same update as
/// torch.optim.AdamW: p ← p·(1 − lr·wd); m ← β1 m + (1 − β1) g; v ← β2 v + (1 − β2) g²;
/// p ← p − lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + ε).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedParameter> params, double beta1, double beta2, double eps, double weight_decay,
        AdamKernels kernels);
  void step(double lr) override;
  OptimizerType type() const override { return OptimizerType::AdamW; }
  std::vector<NamedParameter> state() override { return adam_state(slots_); }

 private:
  void fused_step(double lr);

  std::vector<AdamSlot> slots_;
  double beta1_, beta2_, eps_, wd_;
  AdamKernels kernels_;
  torch::Tensor step_t_;  // Fused: t as the fp32 device scalar the kernel reads for bias correction
};

}  // namespace gridtrain
