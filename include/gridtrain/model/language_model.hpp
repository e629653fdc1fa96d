// What the decoder-only language models (gpt, llama) share: the token windows, the
// vocabulary-parallel token embedding and output head with its fp32 cross-entropy, and the
// layout-independent initialization (each tensor drawn whole from its own generator).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/parallel/shard.hpp"

namespace gridtrain::lm {

/// rows (B, T + 1) int64 windows → {ids (B, T), next ids (B, T)}.
std::pair<torch::Tensor, torch::Tensor> split_windows(const torch::Tensor& rows, std::int64_t T);

/// idx (B, T) int64 global ids → (B, T, C) rows of `weight`; with tp, weight (V/tp, C) is this
/// rank's vocabulary shard and the rows are summed over tp (Megatron's vocabulary-parallel
/// embedding).
torch::Tensor embed(const torch::Tensor& idx, const torch::Tensor& weight, Axis* tp);

/// Per-token cross-entropy (B·T,) fp32, nats, of the output head `weight` (V rows, or this rank's
/// V/tp of spec's padded vocabulary, × C) on x (B, T, C) against targets (B, T). The logits are
/// taken to fp32 whatever autocast computed them in: the softmax needs fp32's range.
torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& targets,
                        const ShardSpec& spec, Axis* tp);

/// Causal attention of q (B, H, Tq, D) over k, v (B, Hkv, Tk, D) (grouped-query where Hkv < H:
/// query head h reads key/value head h / (H/Hkv)), softmax(q kᵀ / sqrt(D)) v, → (B, H, Tq, D).
/// Query i sits at position Tk − Tq + i: with Tq = Tk the causal mask, with Tq = 1 (a decoding step
/// after a KV cache) none. fused: at::scaled_dot_product_attention; else the written-out math.
/// Throws std::invalid_argument for another Tq.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused);

/// Where one layer's attention keeps its keys and values while decoding (cache null: training,
/// validation and uncached logits).
struct CacheSlot {
  KvCache* cache = nullptr;
  std::size_t layer = 0;      ///< the layer's index on this rank
  std::int64_t capacity = 0;  ///< the context length T
  std::int64_t offset() const { return cache ? cache->length : 0; }  ///< position of the first new token
};

/// k, v (B, Hkv, T, D) written at positions [offset, +T) of the slot's layer (its cache allocated
/// for `capacity` positions on first use, so that a decoding step copies its own position only);
/// returns views of the layer's keys and values so far; without a cache, k and v. The caller
/// advances cache.length after the last layer. Throws std::invalid_argument past capacity.
std::pair<torch::Tensor, torch::Tensor> append_kv(const CacheSlot& slot, const torch::Tensor& k, const torch::Tensor& v);

/// How one parameter starts: fill `full` (its global shape, fp32) drawing from `gen`.
using Fill = std::function<void(const std::string& name, torch::Tensor& full, at::Generator& gen)>;

/// Sets every parameter of m from (seed, its name) alone, independent of the process grid: the
/// global tensor filled by fill with a generator seeded by splitmix64(seed ^ fnv1a(name)), then
/// this rank's shard (spec(name)) taken.
void initialize(torch::nn::Module& m, const std::function<ShardSpec(const std::string&)>& spec, int tp_rank,
                int tp_size, std::uint64_t seed, const Fill& fill);

/// Elements of the named parameters' shards on a rank of tp_size (padding included).
std::int64_t local_elements(const std::vector<std::string>& names,
                            const std::function<ShardSpec(const std::string&)>& spec, int tp_size);

/// Whether s ends with suffix (parameter-name matching).
bool ends_with(const std::string& s, const std::string& suffix);

}  // namespace gridtrain::lm
