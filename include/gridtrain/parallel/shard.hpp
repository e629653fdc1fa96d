// Shard maths: how a tensor-parallel rank's local parameter maps onto its global (unsharded)
// tensor. Integer arithmetic only, shared by the model, the checkpoint layout and --dry-run.
#pragma once
#include <cstdint>
#include <vector>

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

  /// Whether tp rank tp_rank counts this tensor once for its replica (the global gradient norm,
  /// the checkpoint writer): a tensor-parallel shard on every tp rank, a replicated tensor on tp
  /// rank 0, a copy owned elsewhere (the tied head, whose gradient equals the embedding's after
  /// the tied sum) nowhere.
  bool counted_on(int tp_rank) const { return owner && (dim >= 0 || tp_rank == 0); }
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
}  // namespace gridtrain
