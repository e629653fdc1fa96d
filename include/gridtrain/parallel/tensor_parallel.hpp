// Megatron-LM tensor parallelism over grid.tp() (Shoeybi et al. 2019, "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", §3): the conjugate operators
// f (identity forward, all-reduce backward) and g (all-reduce forward, identity backward) as
// autograd functions, a vocabulary-parallel embedding and cross-entropy (no rank materializes
// the full logits), and the mapping of a rank's shard onto its parameter's global tensor.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

/// How a local parameter maps onto its global (unsharded) tensor.
struct ShardSpec {
  std::vector<std::int64_t> global_shape;
  /// Dimension split over tp, or -1: replicated on every tp rank.
  int dim = -1;
  /// The dimension holds `parts` equal segments and each is split over tp (the fused q, k, v
  /// rows of c_attn: rank r holds rows r of q, of k and of v).
  int parts = 1;
  /// False for a copy whose gradient and checkpoint entry belong to another rank (the tied
  /// output embedding on the last pipeline stage).
  bool owner = true;
};

/// Rows per tp rank along spec.dim: the global extent (per part) rounded up to a multiple of
/// tp_size, divided by it. A vocabulary of 257 over tp = 2 gives 129 rows each; the last rank's
/// extra row is padding (zero, never a target, masked out of the softmax).
std::int64_t shard_rows(const ShardSpec& spec, int tp_size);
/// Shape of the local tensor of tp rank `rank` of `size`.
std::vector<std::int64_t> local_shape(const ShardSpec& spec, int size);
/// Rows of rank's shard that exist in the global tensor (per part): shard_rows, or fewer on the
/// ranks that hold padding.
std::int64_t valid_rows(const ShardSpec& spec, int rank, int size);
/// rank's shard of the global tensor `full` (zero padding included), contiguous.
torch::Tensor take_shard(const torch::Tensor& full, const ShardSpec& spec, int rank, int size);

/// f: identity forward; backward sums the gradient over tp. Before a column-parallel layer.
torch::Tensor copy_to_tp(const torch::Tensor& x, Axis& tp);
/// g: forward sums x over tp; identity backward. After a row-parallel layer.
torch::Tensor reduce_from_tp(const torch::Tensor& x, Axis& tp);

/// Vocabulary-parallel embedding: idx (B, T) int64 global ids; weight (V_local, C) holds ids
/// [start, start + V_local). Returns (B, T, C), the same on every tp rank.
torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight, std::int64_t start,
                                       Axis& tp);

/// Vocabulary-parallel cross-entropy: logits (N, V_local) of ids [start, start + V_local), of
/// which the first `valid` exist (the rest are padding); targets (N,) global ids. Returns the
/// per-token loss (N,) fp32, nats, the same on every tp rank. Three all-reduces of N values.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           std::int64_t start, std::int64_t valid, Axis& tp);

}  // namespace gridtrain
