// Megatron-LM tensor parallelism over grid.tp() (Shoeybi et al. 2019, "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", §3): the conjugate operators
// f (identity forward, all-reduce backward) and g (all-reduce forward, identity backward) as
// autograd functions, a vocabulary-parallel embedding and cross-entropy (no rank materializes
// the full logits), and the mapping of a rank's shard onto its parameter's global tensor.
#pragma once
#include <cstdint>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/parallel/shard.hpp"

namespace gridtrain {

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
