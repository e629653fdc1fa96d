// A mixture-of-experts layer's router: scores each of N tokens (N, C) against the E experts in
// fp32, whatever autocast computes the rest in, and chooses k experts for it with their combine
// weights (N, k). moe.router picks how:
//   softmax   Mixtral's and Qwen2-MoE's: p = softmax(logits), the k largest p, renormalized to
//             sum 1 with norm_topk_prob;
//   sigmoid   DeepSeek-V3's (arXiv 2412.19437, §2.1.2): s = sigmoid(logits), the k largest s,
//             divided by their sum with norm_topk_prob; what the load-balancing loss averages is
//             s / Σ_e s (its eq. 19's normalized affinities);
//   balanced  forced perfect balance (a benchmark and test mode, as Megatron-Core's
//             moe_router_force_load_balancing): the token at sequence position t goes to experts
//             (t·k + j) mod E, j < k, weighted by the softmax's p there (renormalized as above), so
//             that the router still trains; the same at every layout, since T is.
// With moe.expert_bias_rate γ > 0 the choice (not the weights) goes by score + b_e, the
// auxiliary-loss-free balancing of Wang et al. 2024 (arXiv 2408.15664): b (E,) fp32 is a buffer
// outside the optimizer, named as DeepSeek-V3's e_score_correction_bias, that ExpertBias
// (app/expert_bias.hpp) moves by ±γ after each step from the slots each expert received, which
// the router counts in tokens_per_expert (E,) fp32 during training forwards. Both stay fp32 when
// the model is cast to 2-byte weights.
#pragma once
#include <cstdint>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"

namespace gridtrain::moe {

/// One forward's routing of N tokens over E experts.
struct Routing {
  torch::Tensor logits;   ///< (N, E) fp32: the router's scores before softmax or sigmoid
  torch::Tensor probs;    ///< (N, E) fp32: the probabilities the load-balancing loss averages
  torch::Tensor weights;  ///< (N, k) fp32: the combine weights of the chosen experts
  torch::Tensor chosen;   ///< (N, k) int64: the chosen experts, in [0, E)
};

class Router : public torch::nn::Module {
 public:
  /// expert_bias_rate γ >= 0; 0: no expert bias.
  Router(std::int64_t n_embd, std::int64_t experts, std::int64_t top_k, MoeRouter type, bool norm_topk_prob,
         double expert_bias_rate);
  /// x (N, C) → the routing; x's rows are T-token sequences, one after another (balanced routing
  /// reads each row's position t = n mod T).
  Routing forward(const torch::Tensor& x, std::int64_t T);
  /// The weight (E, C) follows the model's dtype; the bias and the count stay fp32.
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  using torch::nn::Module::to;

  torch::Tensor weight;                  ///< (E, C): "gate.weight", a parameter
  torch::Tensor e_score_correction_bias;  ///< (E,) fp32 buffer; undefined without an expert bias
  torch::Tensor tokens_per_expert;        ///< (E,) fp32 buffer: slots chosen since ExpertBias took them

 private:
  std::int64_t top_k_;
  MoeRouter type_;
  bool norm_topk_prob_;
};

/// The expert bias's move after a step (Wang et al. 2024, Algorithm 1): counts (L, E) the slots
/// each of L routers sent to each expert over the global batch → γ · sign(c̄ − c) (L, E), c̄ each
/// router's mean over its E experts: +γ for an underloaded expert, −γ for an overloaded one, 0 at
/// the mean.
torch::Tensor expert_bias_step(const torch::Tensor& counts, double rate);

}  // namespace gridtrain::moe
