// Mixture-of-experts MLP (Shazeer et al. 2017; Mixtral, Jiang et al. 2024; Qwen2-MoE), computed
// as transformers' MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock compute it: a router
// (E, C) scores each token in fp32 and chooses k experts with their weights (model/router.hpp:
// Mixtral's softmax by default), each token's k expert
// outputs summed with those weights in fp32, in expert order (deterministic); plus, optionally,
// Qwen2-MoE's shared expert, which every token passes through, scaled by sigmoid(shared gate).
// Dropless by default: every routed token is computed; with a capacity factor each expert
// computes at most its capacity of a micro-batch's slots (drop_over_capacity). With expert parallelism each rank builds only its
// experts, under their global indices, and the tokens reach them by all-to-all over ep
// (parallel/expert_parallel.hpp's TokenDispatch, the same permutation and combine at any ep).
// With tensor parallelism the experts are split as the dense MLP is (expert tensor parallelism,
// Megatron-Core's ETP = TP): each tp rank holds 1/t of every expert's width (gate_proj and
// up_proj rows, down_proj columns) and of the shared expert's, routes the same tokens with the
// same (replicated) router, and its experts' partial sums are combined before one all-reduce of
// the layer's output over tp, the dense MLP's g; the combine weights and the experts' input
// carry Megatron's f (their gradients summed over tp).
//
// Parameter names (Qwen2-MoE's on-disk ones, under the block's `mlp.`): gate.weight (E, C),
// experts.<e>.{gate_proj,up_proj}.weight (F_e, C), experts.<e>.down_proj.weight (C, F_e),
// with an expert bias the buffer gate.e_score_correction_bias (E,) (DeepSeek-V3's name),
// shared_expert.{gate,up,down}_proj.weight, shared_expert_gate.weight (1, C).
//
// The balancing losses (RouterLog) are taken over all MoE layers' tokens of one micro-batch
// together, as transformers' load_balancing_loss_func takes them, on every stage's layers.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/model/router.hpp"
#include "gridtrain/parallel/expert_parallel.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"

namespace gridtrain::moe {

/// A llama's experts: how many, how routed, how wide, and in which layers (the [moe] keys).
struct MoeShape {
  std::int64_t experts = 0;            ///< E; 0: a dense model
  std::int64_t top_k = 2;              ///< k
  std::int64_t ffn_hidden = 0;         ///< F_e, each expert's SwiGLU width
  std::int64_t shared_ffn_hidden = 0;  ///< F_s, the shared expert's; 0: none
  bool norm_topk_prob = true;
  MoeRouter router = MoeRouter::Softmax;  ///< how the router scores and chooses (model/router.hpp)
  double expert_bias_rate = 0.0;          ///< γ of the expert bias; 0: none
  double aux_loss_coeff = 0.0, z_loss_coeff = 0.0;
  std::vector<std::int64_t> layers;  ///< the MoE layers' global indices, ascending
  double capacity_factor = 0.0;      ///< 0: dropless (drop_over_capacity)
  bool on(std::int64_t layer) const;
  /// The parameters of one MoE layer's MLP that a token runs through (6 × this is its training
  /// FLOPs per token): the router C·E, k experts' 3·C·F_e, the shared expert's 3·C·F_s and its gate C.
  double active_mlp_params(std::int64_t n_embd) const;
  /// The parameter names of one MoE layer's MLP after "mlp.", in registration order, with the
  /// `count` experts from global index `first` (a rank's share under expert parallelism; -1: all).
  std::vector<std::string> mlp_names(std::int64_t first = 0, std::int64_t count = -1) const;
};

/// A feed-forward network (N.., C) → (N.., C): a dense MLP, an expert, or a mixture of them.
class FeedForward : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

/// Builds one SwiGLU expert of width F, without communication: with expert tensor parallelism F
/// is this tp rank's part of the width and the expert returns its partial sum.
using MakeExpert = std::function<std::shared_ptr<FeedForward>(std::int64_t width)>;

/// What the routers of one micro-batch's forward saw, for its balancing losses, which are taken
/// over all MoE layers together: the running sums [C (E), S (E), Z, R] of the layers so far, C_e
/// the slots routed to expert e (no gradient), S_e the router probabilities of expert e summed
/// over the tokens, Z the summed logsumexp(logits)², R the tokens (rows) — fp32, (2E + 2,).
/// With pipeline parallelism they travel between stages with the activations (Model::carried),
/// so that the last stage's losses cover every stage's layers and their gradient reaches each
/// stage's routers; one stage starts them at zero.
class RouterLog {
 public:
  RouterLog() = default;
  explicit RouterLog(const MoeShape& s) : experts_(s.experts), aux_coeff_(s.aux_loss_coeff), z_coeff_(s.z_loss_coeff) {}
  /// Whether the model has MoE layers (on any stage).
  bool enabled() const { return experts_ > 0; }
  /// 2E + 2: the width of sums().
  std::int64_t width() const { return 2 * experts_ + 2; }
  /// A micro-batch's pass through this stage begins with the sums of the stages before it
  /// ((width(),) fp32, on the device; undefined: none, zeros).
  void start(const torch::Tensor& upstream);
  /// One MoE layer (global index `layer`): its router logits and probabilities (N, E) fp32, the
  /// experts the router chose (N, k; the balancing losses count these, before any capacity drop)
  /// and, with a capacity factor, the slots dropped (scalar; undefined: none). With gradients
  /// enabled (training) its counts and drops also add to the layer's load since the last take_load().
  void add(std::int64_t layer, const torch::Tensor& logits, const torch::Tensor& probs, const torch::Tensor& chosen,
           const torch::Tensor& dropped = {});
  /// The sums through this stage so far, (width(),) fp32 (gradient: through S and Z). Undefined
  /// before start().
  const torch::Tensor& sums() const { return sums_; }
  /// Replaces the sums by over(sums): with context parallelism their sum over the cp ranks, so
  /// that the balancing losses see the micro-batch's whole sequences.
  void combine(const std::function<torch::Tensor(const torch::Tensor&)>& over) { sums_ = over(sums_); }
  /// Switch Transformer's load-balancing loss, E · Σ_e f_e · P_e, with f_e = C_e / R the top-k
  /// selections of expert e per token and P_e = S_e / R its mean router probability, both over
  /// all layers' tokens (transformers' load_balancing_loss_func): k at perfect balance
  /// (f_e = k/E, P_e = 1/E); E at collapse, every token choosing the same k experts and giving
  /// them all its probability. Scalar fp32; its gradient flows through P only. Throws
  /// std::logic_error before any layer (R = 0).
  torch::Tensor aux_loss() const;
  /// ST-MoE's router z-loss (Zoph et al. 2022, eq. 5): Z / R, the mean over all layers' tokens of
  /// logsumexp(logits)². Scalar fp32.
  torch::Tensor z_loss() const;
  /// aux_loss_coeff · aux_loss + z_loss_coeff · z_loss: what a micro-batch's loss adds per token.
  torch::Tensor loss() const;
  /// Each MoE layer's routed slots per expert and then its dropped slots, (E + 1,) fp32 on the
  /// device, summed over the training forwards since the last call, by global layer index (this
  /// stage's layers only); resets them.
  std::vector<std::pair<std::int64_t, torch::Tensor>> take_load();

 private:
  torch::Tensor part(std::int64_t first, std::int64_t n) const;
  std::int64_t experts_ = 0;
  double aux_coeff_ = 0.0, z_coeff_ = 0.0;
  torch::Tensor sums_;
  std::vector<std::pair<std::int64_t, torch::Tensor>> load_;  // ascending layer index
};

/// Expert capacity (GShard, Lepikhin et al. 2021, §2.2; Megatron-Core's topk_softmax_with_capacity
/// with drop_policy "probs"): of the N·k slots of `chosen` (N, k) int64 (experts in [0, experts)),
/// each expert keeps the ⌈factor · N·k / experts⌉ with the largest `weights` (N, k), ties to the
/// earlier token; the others become `experts`, the slot that no expert computes (TokenDispatch).
/// Local to the N tokens (one rank's micro-batch), so the same at every layout.
torch::Tensor drop_over_capacity(const torch::Tensor& chosen, const torch::Tensor& weights, std::int64_t experts,
                                 double factor);

/// One MoE layer's MLP on x (..., C) → (..., C), whole on every tp rank; logs its routing into
/// `log` (which outlives it) as layer `layer`. Holds the experts of `region`'s rank (all without
/// expert parallelism), each tp.local() of its width; forward is collective over region.ep and
/// tp. tp must be without sequence parallelism (copy_to throws std::logic_error).
class MoeMlp : public FeedForward {
 public:
  MoeMlp(std::int64_t n_embd, const MoeShape& s, const MakeExpert& make_expert, RouterLog* log, std::int64_t layer = 0,
         const EpRegion& region = {}, const TpRegion& tp = {});
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  std::int64_t experts_total_, layer_;
  EpRegion region_;
  TpRegion tp_;
  double capacity_factor_;
  RouterLog* log_;
  std::shared_ptr<Router> gate_;
  torch::nn::Linear shared_expert_gate_{nullptr};
  std::vector<std::shared_ptr<FeedForward>> experts_;  // this rank's, from global index region_.first()
  std::shared_ptr<FeedForward> shared_expert_;  // null: none
};

}  // namespace gridtrain::moe
