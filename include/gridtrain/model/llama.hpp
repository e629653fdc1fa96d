// Llama 2/3 decoder (Touvron et al. 2023), computed as Hugging Face transformers'
// LlamaForCausalLM computes it: token embedding, n_layer pre-norm blocks of RMSNorm (Zhang &
// Sennrich 2019), causal grouped-query self-attention (Ainslie et al. 2023) with rotary position
// embeddings (Su et al. 2021, transformers' rotate-half convention: feature i pairs with
// i + D/2), RMSNorm, SwiGLU MLP (Shazeer 2020); final RMSNorm; no biases; the output head tied to
// the embedding or its own (model.tie_embeddings).
//
// Parameter names are transformers' own, so that export and import map names one to one:
// model.embed_tokens.weight, model.layers.<i>.{input_layernorm,post_attention_layernorm}.weight,
// model.layers.<i>.self_attn.{q,k,v,o}_proj.weight, model.layers.<i>.mlp.{gate,up,down}_proj.weight,
// model.norm.weight, lm_head.weight (untied only); <i> is the global layer index. An MoE layer
// (moe.layers) has a moe::MoeMlp instead: model.layers.<i>.mlp.gate.weight and
// mlp.experts.<e>.{gate,up,down}_proj.weight, Qwen2-MoE's names (model/moe.hpp), whole on every rank.
//
// Tensor parallel (Megatron-LM): q/k/v and gate/up are column-parallel (rank r holds query heads
// [r·H/tp, (r+1)·H/tp) and their key/value heads [r·Hkv/tp, (r+1)·Hkv/tp), and F/tp of the MLP
// width), o and down row-parallel; the embedding and the head are vocabulary-parallel (rows
// padded to a multiple of tp); the RMSNorm weights are replicated. Pipeline parallel as the GPT:
// the first stage holds the embedding, the last model.norm and the head (with pp > 1 and tied
// embeddings its own copy of the embedding, whose gradient the trainer sums with the first's).
#pragma once
#include "gridtrain/comm/axis.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/model/moe.hpp"

namespace gridtrain {

struct LlamaShape {
  std::int64_t vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, ffn_hidden;
  double norm_eps, rope_theta;
  bool tie_embeddings;
  bool fused_attention;  ///< at::scaled_dot_product_attention instead of the written-out math
  Recompute recompute;   ///< train.recompute
  lm::DocumentRules documents{};  ///< data.eod_token and the document keys
  moe::MoeShape moe{};  ///< the [moe] keys: which layers' MLPs are mixtures of experts
  std::int64_t head_dim() const { return n_embd / n_head; }
};

/// This rank's part of a Llama for a layout: its parameters' shards and its costs.
class LlamaPlan : public LanguageModelPlan {
 public:
  LlamaPlan(const LlamaShape& s, const ModelLayout& layout);
  const LlamaShape& shape() const { return s_; }
  /// The output head's parameter: lm_head.weight, or the embedding when tied.
  std::string head_name() const { return s_.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"; }
  std::vector<std::string> names() const override;
  /// Throws std::invalid_argument for a name that is not a Llama parameter.
  ShardSpec shard(const std::string& name) const override;
  /// 6·N + 12·L·C·T per token (PaLM, Chowdhery et al. 2022, App. B), N the whole model's
  /// parameters with the SwiGLU and grouped-query projections, the vocabulary matrix counted once
  /// (as the head: an untied input embedding is a lookup, no multiply).
  double flops_per_item() const override;
  std::int64_t kv_width() const override { return s_.n_kv_head * s_.head_dim(); }
  int units() const override { return static_cast<int>(layers()) + 2; }  // embedding, blocks, norm + head

 protected:
  /// b·T·C·(12 + (4 + 4·Hkv/H + 8·F/C + 2 with sdpa)/t) bytes at 2-byte activations (with
  /// sequence parallelism the 12 also /t), counted as Korthikanti et al. 2022 §4.2 count the
  /// GPT's: replicated (or split by sequence parallelism), the block input and of each
  /// RMSNorm the normalized input and the output; split by tp, q, k, v, o_proj's input, with
  /// sdpa its own output too, and the SwiGLU's gate, up, silu(gate) and product; and the
  /// scores' (the softmax output's) b·T·C·2·H·T/(C·t) for math attention.
  LayerActivations layer_activations(int micro_batch, int elem_bytes) const override;

 private:
  LlamaShape s_;
};

/// RMSNorm: x · rsqrt(mean(x², -1) + eps) in fp32, cast back to x's type, times weight (C,)
/// (a replicated parameter of region: with sequence parallelism x is this rank's slice).
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(std::int64_t c, double eps, const TpRegion& region = {});
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)

 private:
  torch::Tensor weight_;
  double eps_;
  TpRegion region_;
};

/// Rotary tables: cos and sin (T, D) fp32 of position t and feature i, angle t·θ^(−2(i mod D/2)/D).
struct Rope {
  torch::Tensor cos, sin;
};

class LlamaAttention : public torch::nn::Module {
 public:
  LlamaAttention(const LlamaShape& s, const TpRegion& region);
  /// x (B, T, C) at positions [slot.offset(), +T) → (B, T, C); with sequence parallelism both
  /// this rank's slice (B, T/t, C).
  torch::Tensor forward(const torch::Tensor& x, const Rope& rope, const lm::CacheSlot& slot = {});

 private:
  TpRegion region_;
  std::int64_t n_head_, n_kv_head_, head_dim_;  // heads on this tp rank
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  bool fused_;
  Recompute recompute_;  // selective: the attention core runs again in backward
};

/// The SwiGLU MLP of width F (F/tp on this rank), also an expert's (region: none).
class LlamaMlp : public moe::FeedForward {
 public:
  LlamaMlp(std::int64_t n_embd, std::int64_t width, const TpRegion& region);
  torch::Tensor forward(const torch::Tensor& x) override;  // (B, T, C) -> down(silu(gate x) · up x), (B, T, C) (SP: T/t)

 private:
  TpRegion region_;
  torch::nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};

class LlamaBlock : public lm::DecoderBlock {
 public:
  /// rope: the model's rotary tables, which outlive the block; layer: its global index; routers:
  /// the model's router log (for an MoE layer's MLP), which outlives it; experts: where an MoE
  /// layer's experts sit on ep.
  LlamaBlock(const LlamaShape& s, const TpRegion& region, const Rope& rope, std::int64_t layer,
             moe::RouterLog* routers, const EpRegion& experts = {});
  torch::Tensor forward(const torch::Tensor& x, const lm::CacheSlot& slot) override;  // (B, T, C) -> (B, T, C)

 private:
  const Rope& rope_;
  std::shared_ptr<RmsNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<LlamaAttention> self_attn_;
  std::shared_ptr<moe::FeedForward> mlp_;  // LlamaMlp, or moe::MoeMlp in an MoE layer
};

class Llama : public LanguageModel {
 public:
  explicit Llama(const LlamaShape& s, const ModelLayout& layout = {});
  std::string describe() const override;
  /// model.embed_tokens is an embedding, lm_head the head.
  TensorClass tensor_class(const std::string& name) const override;
  /// embedding 0, block i of this stage 1 + i, model.norm with lm_head 1 + layers; the tied head
  /// gathers the embedding (unit 0) with the norm.
  int unit_of(const std::string& name) const override;
  const LlamaShape& shape() const { return plan_.shape(); }

 private:
  static constexpr int kEmbed = 0, kBlocks = 1;  // units (unit_of); model.norm and lm_head after the blocks
  const LanguageModelPlan& language_plan() const override { return plan_; }
  torch::Tensor embed(const torch::Tensor& idx, std::int64_t offset, const torch::Tensor& positions) override;  // positions are the blocks' (rope)
  torch::Tensor final_norm(const torch::Tensor& x) override { return norm_->forward(x); }
  torch::Tensor& head_weight() override { return tied() ? embed_tokens_->weight : lm_head_->weight; }
  std::string head_name() const override { return plan_.head_name(); }
  bool tied() const override { return shape().tie_embeddings; }
  std::string embedding_name() const override { return "model.embed_tokens.weight"; }
  /// Weights ~ N(0, 0.02) (transformers' initializer_range), the residual projections o_proj and
  /// down_proj ~ N(0, 0.02/sqrt(2·L)) (GPT-2's scaling), RMSNorm weights 1.
  void fill(const std::string& name, torch::Tensor& full, at::Generator& gen) const override;

  LlamaPlan plan_;
  Rope rope_;  // (block_size, D), buffers
  torch::nn::Embedding embed_tokens_{nullptr};
  std::shared_ptr<RmsNorm> norm_;
  torch::nn::Linear lm_head_{nullptr};
};

}  // namespace gridtrain
