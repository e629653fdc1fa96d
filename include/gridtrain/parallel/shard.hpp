// Shard maths: how a rank's local parameter maps onto its global (unsharded) tensor when one
// dimension is split over a grid axis (tp; G22's experts along ep). Integer arithmetic only,
// shared by the model, the checkpoint layout and --dry-run; the functions take the split axis's
// size and this rank's place on it.
#pragma once
#include <cstdint>
#include <vector>

#include "gridtrain/grid/grid.hpp"

namespace gridtrain {

/// How a local parameter maps onto its global (unsharded) tensor.
struct ShardSpec {
  std::vector<std::int64_t> global_shape;
  /// Dimension split over `axis`, or -1: replicated.
  int dim = -1;
  /// The dimension holds `parts` equal segments and each is split over the axis (the fused q, k, v
  /// rows of c_attn: rank r holds rows r of q, of k and of v).
  int parts = 1;
  /// False for a copy whose gradient and checkpoint entry belong to another rank (the tied
  /// output embedding on the last pipeline stage).
  bool owner = true;
  /// The axis dim is split over. The checkpoint writes each rank's rows of the global tensor by
  /// its place on this axis, and a tensor split along a data axis (dp) is written by every rank of
  /// it; a tensor split along any axis but tp counts toward the norm on tp rank 0, as a replicated
  /// one does.
  AxisId axis = AxisId::Tp;
  /// An MoE expert's tensor (G22): held whole by one ep rank (the model names it by its global
  /// expert index) and replicated over that rank's expert-data-parallel group, whose gradients
  /// and ZeRO shards it shares; written by the group's rank 0.
  bool expert = false;

  /// Whether tp rank tp_rank counts this tensor once for its replica (the global gradient norm,
  /// the checkpoint writer): a tensor-parallel shard on every tp rank, a tensor replicated over tp
  /// on tp rank 0, a copy owned elsewhere (the tied head, whose gradient equals the embedding's
  /// after the tied sum) nowhere.
  bool counted_on(int tp_rank) const { return owner && ((dim >= 0 && axis == AxisId::Tp) || tp_rank == 0); }
};

/// Rows per rank of spec.axis along spec.dim: the global extent (per part) rounded up to a
/// multiple of the axis size, divided by it. A vocabulary of 257 over tp = 2 gives 129 rows each; the last rank's
/// extra row is padding (zero, never a target, masked out of the softmax).
std::int64_t shard_rows(const ShardSpec& spec, int tp_size);
/// Shape of the local tensor of a rank on an axis of `size` ranks.
std::vector<std::int64_t> local_shape(const ShardSpec& spec, int size);
/// Rows of rank's shard that exist in the global tensor (per part): shard_rows, or fewer on the
/// ranks that hold padding.
std::int64_t valid_rows(const ShardSpec& spec, int rank, int size);
}  // namespace gridtrain
