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
// Not yet wired into the grid and the models: tests/mpi/test_context_parallel.cpp proves it
// against full causal attention on one rank.
#pragma once
#include <cstdint>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

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

}  // namespace gridtrain
