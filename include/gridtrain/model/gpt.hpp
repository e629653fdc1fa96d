// GPT-2-style decoder (Radford et al. 2019; layout after nanoGPT / llm.c):
// token + learned position embeddings, n_layer pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU (tanh) MLP of width 4C, final LayerNorm, output weights tied to the
// token embedding. Parameter names: wte.weight, wpe.weight, h.<i>.{ln_1,attn.c_attn,attn.c_proj,
// ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}, ln_f.{weight,bias}; <i> is the global layer index on
// every pipeline stage, so names and checkpoints do not depend on the layout.
//
// Tensor parallel (Megatron-LM, parallel/tensor_parallel.hpp): c_attn and c_fc are
// column-parallel (rank r holds heads [r·H/tp, (r+1)·H/tp) and 4C/tp of the MLP width),
// the two c_proj are row-parallel with their bias added after the all-reduce, wte is
// vocabulary-parallel (rows padded to a multiple of tp) and so is the tied head with its
// cross-entropy; LayerNorms, wpe and the row-parallel biases are replicated.
// Pipeline parallel: a stage holds its chunks' layers (one range, or with the interleaved
// schedule one per virtual stage); the first stage also wte and wpe, the last ln_f and (with
// pp > 1) its own copy of wte for the tied head, whose gradient the trainer sums with the first
// stage's.
#pragma once
#include "gridtrain/comm/axis.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/model/model.hpp"

namespace gridtrain {

struct GptShape {
  std::int64_t vocab_size, block_size, n_layer, n_head, n_embd;
  bool fused_attention = false;  ///< at::scaled_dot_product_attention instead of the written-out math
  Recompute recompute = Recompute::None;  ///< train.recompute
  lm::DocumentRules documents{};           ///< data.eod_token and the document keys
};

/// This rank's part of a GPT for a layout: its parameters' shards and its costs.
class GptPlan : public LanguageModelPlan {
 public:
  GptPlan(const GptShape& s, const ModelLayout& layout);
  const GptShape& shape() const { return s_; }
  std::vector<std::string> names() const override;
  /// Throws std::invalid_argument for a name that is not a GPT parameter.
  ShardSpec shard(const std::string& name) const override;
  /// 6·N + 12·L·C·T per token (PaLM, Chowdhery et al. 2022, App. B; N excludes wpe, as nanoGPT),
  /// with N the whole model's count whatever the layout.
  double flops_per_item() const override;
  std::int64_t kv_width() const override { return s_.n_embd; }
  int units() const override { return static_cast<int>(layers()) + 3; }  // blocks, wte, wpe, ln_f

 protected:
  /// b·T·C·(10 + 24/t) bytes at 2-byte activations (with sequence parallelism 10/t + 24/t) and
  /// the scores' b·T·C·2·H·T/(C·t) (Korthikanti et al. 2022, §4.2; of the scores' 5 a s² b the
  /// softmax output, there being no dropout; the rest counted with its dropout masks, an upper
  /// bound), scaled to elem_bytes.
  LayerActivations layer_activations(int micro_batch, int elem_bytes) const override;

 private:
  GptShape s_;
};

class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(const GptShape& s, const TpRegion& region);
  /// x (B, T, C) -> (B, T, C); with sequence parallelism both this rank's slice (B, T/t, C).
  torch::Tensor forward(const torch::Tensor& x, const lm::CacheSlot& slot = {});

 private:
  TpRegion region_;
  std::int64_t n_head_;  // heads on this tp rank
  torch::nn::Linear c_attn_{nullptr}, c_proj_{nullptr};
  bool fused_;
  Recompute recompute_;  // selective: the attention core runs again in backward
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(const GptShape& s, const TpRegion& region);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C), or (B, T/t, C) with SP

 private:
  TpRegion region_;
  torch::nn::Linear c_fc_{nullptr}, c_proj_{nullptr};
};

class Block : public lm::DecoderBlock {
 public:
  Block(const GptShape& s, const TpRegion& region);
  torch::Tensor forward(const torch::Tensor& x, const lm::CacheSlot& slot) override;  // (B, T, C) -> (B, T, C), or (B, T/t, C) with SP

 private:
  TpRegion region_;
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

class Gpt : public LanguageModel {
 public:
  explicit Gpt(const GptShape& s, const ModelLayout& layout = {});
  std::string describe() const override;
  /// wte and wpe are embeddings; wte is also the output head (tied).
  TensorClass tensor_class(const std::string& name) const override;
  /// wte 0, wpe 1, block i of this stage 2 + i, ln_f 2 + layers: the tied head gathers wte
  /// (unit 0) with ln_f, and with one stage keeps it gathered from the embedding on.
  int unit_of(const std::string& name) const override;
  const GptShape& shape() const { return plan_.shape(); }

 private:
  static constexpr int kWte = 0, kWpe = 1, kBlocks = 2;  // units (unit_of); ln_f after the blocks
  const LanguageModelPlan& language_plan() const override { return plan_; }
  torch::Tensor embed(const torch::Tensor& idx, std::int64_t offset, const torch::Tensor& positions) override;  // wte + wpe
  torch::Tensor final_norm(const torch::Tensor& x) override;                     // ln_f
  torch::Tensor& head_weight() override { return wte_->weight; }
  std::string head_name() const override { return "wte.weight"; }
  bool tied() const override { return true; }
  std::string embedding_name() const override { return "wte.weight"; }
  /// GPT-2 init: weights ~ N(0, 0.02), residual projections (c_proj) ~ N(0, 0.02/sqrt(2·L)),
  /// biases 0, LayerNorm weight 1.
  void fill(const std::string& name, torch::Tensor& full, at::Generator& gen) const override;

  GptPlan plan_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
};

}  // namespace gridtrain
