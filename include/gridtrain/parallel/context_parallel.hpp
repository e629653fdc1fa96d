// Context parallelism's attention (G23): the sequence of T tokens is split over the cp ranks of
// an axis in the load-balanced causal layout (Megatron-Core's get_batch_on_this_cp_rank): viewed
// as 2·cp chunks of T/(2·cp), rank i holds chunks i and 2·cp − 1 − i, so that under the causal
// mask every rank has the same work. Ring attention (Liu et al. 2023, "Ring Attention with
// Blockwise Transformers for Near-Infinite Context") moves the key/value chunks around the ring
// of cp ranks, each step's transfer overlapped with the attention over the chunk that arrived
// before it, and merges the partial results by their log-sum-exp (the online softmax; Milakov &
// Gimelshein 2018). Its backward runs the same ring, the key/value gradients travelling with
// their chunks until they are home. Grouped-query attention sends only the key/value heads.
//
// The all-gather variant (Llama 3's, grid.cp_comm = allgather) gathers the keys and values of
// the whole sequence instead and runs one attention over them under the load-balanced causal mask.
// A language model meets cp through its CpRegion (grid.cp, the layout's cp axis), as it meets tp
// through its TpRegion.
#pragma once
#include <cstdint>
#include <utility>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"

namespace gridtrain {

/// Scores per query tile of ring attention's blocks, (B, H, rows, 2·S) ≈ this many fp32 elements
/// (4 MiB): a block's transient memory stays bounded whatever T/cp is.
inline constexpr std::int64_t kRingTileElements = std::int64_t{1} << 20;

/// The global positions (2·S,) int64 of the tokens cp rank `rank` of `cp` holds in the
/// load-balanced layout of a sequence of T = 2·cp·S: chunks rank and 2·cp − 1 − rank, in order.
torch::Tensor context_positions(std::int64_t T, int rank, int cp);

/// Merges one block's attention into the running result, in place, fp32: out (..., N, D) and
/// lse (..., N) the result and log-sum-exp of the blocks so far, block_out and block_lse the
/// block's. The stable form out −= σ(lse_b − lse)·(out − out_b), lse = logaddexp(lse, lse_b);
/// a row no block has reached yet (lse = −inf) takes the block's, a row the block masks whole
/// (lse_b = −inf) keeps its own, a row masked in both stays out = 0, lse = −inf.
void merge_attention(torch::Tensor& out, torch::Tensor& lse, const torch::Tensor& block_out,
                     const torch::Tensor& block_lse);

/// Causal attention of this rank's queries q (B, H, 2·S, D) over the whole sequence's keys and
/// values, of which it holds k, v (B, Hkv, 2·S, D) (H a multiple of Hkv), all in the
/// load-balanced layout over cp (context_positions): softmax(q·kᵀ·scale + causal mask)·v,
/// (B, H, 2·S, D) in q's dtype, computed in fp32. Differentiable; forward and backward are
/// collective over cp (each cp − 1 and cp ring steps of non-blocking sends and receives).
/// Throws CommTimeout when a neighbour does not answer in the axis's timeout.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                             Axis& cp);

/// This cp rank's k, v (B, Hkv, 2·S, D) in the load-balanced layout → the whole sequence's
/// (B, Hkv, T, D), in position order, gathered over cp in k's dtype. Differentiable: backward
/// reduce-scatters the gradients over cp (summed in fp32) to this rank's chunks. Collective over
/// cp; throws CommTimeout past the axis's timeout.
std::pair<torch::Tensor, torch::Tensor> all_gather_kv(const torch::Tensor& k, const torch::Tensor& v, Axis& cp);

/// x (fp32) summed over cp, on every cp rank. Differentiable: each rank's loss of the sum reaches
/// every rank's x, so backward sums the gradients over cp as well (Megatron's all-reduce over the
/// tp-cp group for the MoE routers' statistics). Collective over cp; throws CommTimeout past the
/// axis's timeout.
torch::Tensor sum_over_context(const torch::Tensor& x, Axis& cp);

/// Where context parallelism meets a language model's layers: the cp axis its sequences are split
/// over (null: each sequence whole on this rank) and how attention reaches the other chunks.
struct CpRegion {
  Axis* cp = nullptr;
  ContextExchange exchange = ContextExchange::Ring;
  /// This rank's tokens of t (B, T, ...) along dim 1, (B, 2·S, ...) in the load-balanced layout;
  /// t itself without cp.
  torch::Tensor local(const torch::Tensor& t) const;
  /// The global positions (B, 2·S) int64 of this rank's tokens of a micro-batch of B windows of T
  /// (the embeddings' and rotary tables' rows); undefined without cp.
  torch::Tensor positions(std::int64_t B, std::int64_t T, const torch::Device& device) const;
  /// The all-gather variant's mask (1, 1, 2·S, T) bool: true where a key of the whole sequence is
  /// at or before this rank's query.
  torch::Tensor causal_mask(std::int64_t T, const torch::Device& device) const;
};

}  // namespace gridtrain
