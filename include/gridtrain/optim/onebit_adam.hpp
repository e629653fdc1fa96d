// 1-bit Adam: AdamW until its freeze step, then 1-bit compressed momentum exchange over dp.
#pragma once
#include <memory>
#include <vector>

#include "gridtrain/optim/adamw.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"

namespace gridtrain {

/// 1-bit Adam (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale Training with
/// Adam's Convergence Speed"). For the first freeze_step steps it is AdamW on allreduced
/// gradients. Then the second moment v is frozen (with its bias correction), gradients stay
/// local, and each step updates the local momentum m ← β1 m + (1 − β1) g and replaces it by its
/// mean over dp, exchanged 1-bit compressed with worker and server error feedback
/// (compressed_allreduce_mean); p ← p·(1 − lr·wd) − lr/(1 − β1^t) · m / (sqrt(v/(1 − β2^T)) + ε).
/// All momenta live in one flat buffer, so a step makes one compressed exchange.
///
/// Once v is frozen, the compressed momentum gives every coordinate a magnitude of its chunk's
/// scale, also those whose gradient was ~0 until the freeze (v ≈ 0): they would move
/// lr·scale/ε a step (~10³ at ε = 1e-8). v_floor > 0 raises the frozen √v̂ to at least v_floor
/// (gradient units) at the freeze, bounding that move by lr·scale/v_floor; 0 keeps the paper's rule.
class OnebitAdam : public Optimizer {
 public:
  OnebitAdam(std::vector<NamedParameter> params, Axis& dp, double beta1, double beta2, double eps,
             double weight_decay, long long freeze_step, double v_floor = 0);
  void step(double lr) override;
  OptimizerType type() const override { return OptimizerType::OnebitAdam; }
  std::vector<NamedParameter> state() override { return adam_state(slots_); }
  bool owns_communication() const override { return steps_ >= freeze_; }
  std::vector<std::pair<std::string, torch::Tensor>> rank_state() override;

 private:
  Axis& dp_;
  std::vector<AdamSlot> slots_;  // exp_avg: views into flat_exp_avg_
  torch::Tensor flat_exp_avg_;  // (N,) all momenta
  std::unique_ptr<Compressor> onebit_;
  FeedbackState feedback_;
  double beta1_, beta2_, eps_, wd_, v_floor_;
  long long freeze_;
};

}  // namespace gridtrain
