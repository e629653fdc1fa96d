// Megatron-LM tensor parallelism over grid.tp() (Shoeybi et al. 2019, "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", §3): where the
// tensor-parallel layers meet the rest (TpRegion: the conjugate operators f and g as autograd
// functions, or their sequence-parallel forms), a vocabulary-parallel embedding and
// cross-entropy (no rank materializes the full logits), and the mapping of a rank's shard onto
// its parameter's global tensor.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/parallel/shard.hpp"

namespace gridtrain {

/// rank's shard of the global tensor `full` (zero padding included), contiguous.
torch::Tensor take_shard(const torch::Tensor& full, const ShardSpec& spec, int rank, int size);

/// How a model's tensor-parallel layers meet the rest of it over tp (null: no tensor
/// parallelism): Megatron's conjugate f (identity forward, all-reduce backward) before a
/// column-parallel layer and g (all-reduce forward, identity backward) after a row-parallel one;
/// or with sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in
/// Large Transformer Models", §4.2.2) their sequence-parallel forms: between the tensor-parallel
/// layers (norms, residual stream, embedding) each rank holds 1/t of the tokens, shaped
/// (B, T/t, C), f becomes an all-gather of the tokens (backward: a reduce-scatter) and g a
/// reduce-scatter (backward: an all-gather), the same bytes as the two all-reduces. Rank r's
/// tokens are the contiguous block [r·B·T/t, (r+1)·B·T/t) of the micro-batch's B·T in (B, T)
/// order: with B = 1 Megatron's slice [r·T/t, (r+1)·T/t) of the sequence, which Megatron's
/// (T, B, C) layout makes contiguous along T and ours along the flattened tokens, so that the
/// collectives need no transpose (the layers between are per token and do not care which).
/// T must be a multiple of t (plan_launch refuses other decks).
struct TpRegion {
  Axis* tp = nullptr;
  bool sequence_parallel = false;  ///< ignored without tp (or with one tp rank)

  bool sp() const { return tp && tp->size() > 1 && sequence_parallel; }
  /// This rank's part of a width split over tp (column-parallel outputs, row-parallel inputs,
  /// heads): n / tp, or n without tp.
  std::int64_t local(std::int64_t n) const { return tp ? n / tp->size() : n; }
  /// Column-parallel linears sharing the input x: each x·Wᵢᵀ + bᵢ, (B, T, Nᵢ), Wᵢ (Nᵢ, C) this
  /// rank's rows, biases empty or one per weight. x is (B, T, C), whole on every rank; with SP
  /// this rank's tokens (B, T/t, C), all-gathered, and only they are kept for backward (gathered
  /// again there: the activation memory sequence parallelism exists to save).
  std::vector<torch::Tensor> column(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                    const std::vector<torch::Tensor>& biases = {}) const;
  /// Megatron's f alone (copy_to_tensor_model_parallel_region), for tensor-parallel shards that
  /// are not linears of x itself (the MoE layer's experts, reached through the token dispatch,
  /// and the weights their partial sums are combined with): x, its gradient summed over tp.
  /// Without tp: x. Throws std::logic_error with sequence parallelism (x is not whole there).
  torch::Tensor copy_to(const torch::Tensor& x) const;
  /// A row-parallel layer's partial sums (B, T, C) (or a vocabulary shard's embedding rows):
  /// summed over tp; with SP, this rank's tokens of the sum (B, T/t, C). Without tp: as is.
  torch::Tensor row(const torch::Tensor& partial) const;
  /// A replicated parameter used on this rank's part of the sequence (a norm's weight, a
  /// row-parallel bias, the position embedding): with SP each rank's gradient covers its tokens
  /// only, so the backward sums it over tp; otherwise p itself.
  torch::Tensor replicated(const torch::Tensor& p) const;
  /// The positions in their sequences of the tokens this rank holds between the tensor-parallel
  /// layers, int64 from offset: (T,) for every sequence of the batch, or with SP (B, T/t).
  torch::Tensor positions(std::int64_t B, std::int64_t T, std::int64_t offset, const torch::TensorOptions& options) const;
  /// Per-token values t (B, T) → those of the tokens this rank holds between the tensor-parallel
  /// layers, in positions()'s order: (B, T/t) with sequence parallelism, else t.
  torch::Tensor local_tokens(const torch::Tensor& t) const;
};

/// Vocabulary-parallel embedding: idx (B, T) int64 global ids; weight (V_local, C) holds ids
/// [start, start + V_local). Returns region.row() of the rows: (B, T, C), the same on every tp
/// rank, or with SP this rank's tokens (B, T/t, C).
torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight, std::int64_t start,
                                       const TpRegion& region);

/// Vocabulary-parallel cross-entropy: logits (N, V_local) of ids [start, start + V_local), of
/// which the first `valid` exist (the rest are padding); targets (N,) global ids. Returns the
/// per-token loss (N,) fp32, nats, the same on every tp rank. Three all-reduces of N values.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           std::int64_t start, std::int64_t valid, Axis& tp);

}  // namespace gridtrain
