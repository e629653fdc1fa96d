// GPT-2-style decoder (Radford et al. 2019; layout after nanoGPT / llm.c):
// token + learned position embeddings, n_layer pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU (tanh) MLP of width 4C, final LayerNorm, output weights tied to the
// token embedding. Parameter names: wte.weight, wpe.weight, h.<i>.{ln_1,attn.c_attn,attn.c_proj,
// ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}, ln_f.{weight,bias}.
#pragma once
#include "gridtrain/model/language_model.hpp"

namespace gridtrain {

struct GptShape {
  std::int64_t vocab_size, block_size, n_layer, n_head, n_embd;
};

class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(const GptShape& s);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  std::int64_t n_head_;
  torch::nn::Linear c_attn_{nullptr}, c_proj_{nullptr};
  torch::Tensor mask_;  // (block_size, block_size) bool, true above the diagonal
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const GptShape& s);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  torch::nn::Linear c_fc_{nullptr}, c_proj_{nullptr};
};

class Block : public torch::nn::Module {
 public:
  explicit Block(const GptShape& s);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

class Gpt : public LanguageModel {
 public:
  explicit Gpt(const GptShape& s);
  /// idx (B, T) int64, T <= block_size -> logits (B, T, V), fp32 (bf16/fp16 under autocast).
  torch::Tensor forward(const torch::Tensor& idx);
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) override;
  torch::Tensor loss_sum(const torch::Tensor& idx, const torch::Tensor& targets) override;
  /// 6·N + 12·L·C·T per token (PaLM, Chowdhery et al. 2022, App. B; N excludes wpe, as nanoGPT).
  double flops_per_token() const override;
  /// Per layer b·T·C·(34 + 5·H·T/C) bytes at 2-byte activations (Korthikanti et al. 2022, §4.1,
  /// "Reducing Activation Recomputation in Large Transformer Models"; no dropout here, so an
  /// upper bound), scaled to elem_bytes; plus the fp32 logits and their softmax, 8·b·T·V.
  double activation_bytes(int micro_batch, int elem_bytes) const override;
  /// GPT-2 init: weights ~ N(0, 0.02), residual projections (c_proj) ~ N(0, 0.02/sqrt(2·L)),
  /// biases 0, LayerNorm weight 1; each tensor drawn from its own generator seeded by
  /// splitmix64(seed, fnv1a(name)).
  void initialize(std::uint64_t seed) override;
  const GptShape& shape() const { return s_; }

 private:
  torch::Tensor fp32_logits(const torch::Tensor& idx);  // (B·T, V) fp32

  GptShape s_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<std::shared_ptr<Block>> h_;
  torch::nn::LayerNorm ln_f_{nullptr};
};

}  // namespace gridtrain
