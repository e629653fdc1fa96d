// Auxiliary-loss-free load balancing (Wang et al. 2024, arXiv 2408.15664, Algorithm 1; DeepSeek-V3
// §2.1.2) as a step fix (app/fix.hpp): after each update every MoE router's expert bias
// b (E,) (model/router.hpp) moves by
//     b_e ← b_e + γ · sign(c̄ − c_e),
// c_e the slots the router sent to expert e over the step's global batch (its micro-batches,
// summed over the dp × cp ranks, which see different tokens; tp ranks see the same), c̄
// their mean over e, γ = moe.expert_bias_rate. Every replica applies the same sums, so the
// biases stay equal without averaging. A step that does not update (skipped, retried) leaves b
// as it was and forgets its counts. The biases are checkpointed with the model (Model::kept_state).
#pragma once
#include <vector>

#include <torch/torch.h>

#include "gridtrain/app/fix.hpp"

namespace gridtrain {

class ExpertBias final : public Fix {
 public:
  /// ctx.model's routers have expert biases (moe.expert_bias_rate > 0); this stage may have none.
  explicit ExpertBias(const FixContext& ctx);
  void describe(Log& log) const override;
  /// Collective over dp (one allreduce of every MoE layer's counts on this stage).
  void after_update(long long s) override;
  void on_skip(long long s) override;

 private:
  Axis& dp_;
  double rate_;
  std::vector<torch::Tensor> biases_, counts_;  // each of this stage's routers' (E,) fp32, in place
};

}  // namespace gridtrain
