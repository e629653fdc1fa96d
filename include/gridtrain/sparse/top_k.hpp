// Layout-invariant top-k: the k largest elements of a tensor that lies in parts on several ranks
// (tensor-parallel shards, ZeRO pieces), found without gathering it. Keys are non-negative int32
// (the bit pattern of a non-negative fp32 orders as the float does); ties go to the smaller global
// flat index, so the selection is a function of the global tensor alone, whatever the layout.
//
// A bisection over the key's 31 bits finds the threshold (the k-th largest key), then one over
// the global index splits the ties at it; each probe counts the elements above it on every rank
// and sums the counts of all tensors at once, one small allreduce per probe (about 31 + log2 N).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace gridtrain {

/// This rank's part of one tensor for select_top_k.
struct TopKPart {
  torch::Tensor key;    ///< (n,) int32: >= 0 for a candidate, -1 for an element never selected
  torch::Tensor index;  ///< (n,) int64: each element's flat index in the global tensor
  std::int64_t numel;   ///< elements of the global tensor (indices lie in [0, numel))
  std::int64_t k;       ///< how many to select over the whole tensor
  bool counted;         ///< whether this rank's counts add to the total (false: a replica's copy)
};

/// Sums per-tensor counts over the ranks holding disjoint parts of the tensors, in place.
using CountSum = std::function<void(std::vector<double>& counts)>;

/// For each part, a bool (n,) tensor: the min(k, candidates) candidates of its tensor with the
/// largest keys, ties broken by smaller global index. Collective through `sum`: every rank of it
/// passes the same tensors in the same order.
std::vector<torch::Tensor> select_top_k(const std::vector<TopKPart>& parts, const CountSum& sum);

/// The order key of |x|: the int32 bit pattern of |x| in fp32, (n,) for x of n elements.
torch::Tensor magnitude_key(const torch::Tensor& x);

/// A uniform random key in [0, 2^31) per global index, from splitmix64 of (seed, step, tensor name,
/// index) alone: the same on every layout. index (n,) int64 (any device) → (n,) int32.
torch::Tensor random_key(std::uint64_t seed, long long step, const std::string& name, const torch::Tensor& index);

}  // namespace gridtrain
