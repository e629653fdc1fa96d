// Expert parallelism (G22): an MoE layer's E experts split over the ep axis, rank r holding the
// E / ep experts [r·E/ep, (r+1)·E/ep), and each token's routed copies sent to the ranks that hold
// their experts and back (GShard, Lepikhin et al. 2021, §2.2; Megatron-Core's
// MoEAlltoAllTokenDispatcher). One dispatch, for N tokens routed to k experts each:
//
//   slots (N·k) sorted by expert, stably     → rows (N·k, C), global-expert order
//   counts per expert: MPI_Alltoall          → who sends how many rows to each local expert
//   rows: MPI_Alltoallv of contiguous rows   → (M, C), source-rank-major
//   permute to expert-major                  → each local expert's rows together, sources in rank order
//   experts, then the same steps reversed, and the combine: each token's k outputs weighted and
//   summed in fp32 in expert order (a fixed order: deterministic, and the same at every ep).
//
// With ep = 1 (or no axis) nothing is exchanged and the same permutation and combine run, so one
// rank computes what any ep computes. Every step is a permutation (index_select by a permutation,
// whose gradient is another) or a fixed-order sum, so backward is deterministic too.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

/// Where a layer's experts sit on the ep axis: null (or one rank) holds them all.
struct EpRegion {
  Axis* ep = nullptr;
  int size() const { return ep ? ep->size() : 1; }
  int rank() const { return ep ? ep->rank() : 0; }
  /// Experts on this rank of E: E / size(); the first is rank()·E / size().
  std::int64_t local(std::int64_t experts) const { return experts / size(); }
  std::int64_t first(std::int64_t experts) const { return rank() * local(experts); }
};

/// One micro-batch's routing through one MoE layer: built from the chosen experts, then
/// dispatch() the tokens, run each local expert on its rows, and combine() the outputs.
class TokenDispatch {
 public:
  /// chosen (N, k) int64: each token's experts (global indices in [0, experts), or `experts`
  /// for a slot dropped by capacity, which no expert computes and combine() gives zeros), each
  /// row ascending (the combine's order). Exchanges the counts over region.ep (collective over it).
  /// Throws std::invalid_argument when experts is not divisible by the ep size.
  TokenDispatch(const torch::Tensor& chosen, std::int64_t experts, const EpRegion& region);

  /// x (N, C) → the rows this rank's experts compute, (M, C) in x's dtype, expert-major: local
  /// expert j's rows() from offset Σ_{i<j} rows(i). Collective over ep (an autograd function:
  /// the gradient flows back by the reverse exchange).
  torch::Tensor dispatch(const torch::Tensor& x) const;
  /// Rows of local expert j in dispatch()'s output.
  const std::vector<std::int64_t>& rows() const { return expert_rows_; }
  /// y (M, C): the local experts' outputs in dispatch()'s order → (N, C) fp32, token n's
  /// Σ_k weights[n, k] · y of its k-th slot, summed over k in order. weights (N, k), the chosen
  /// experts' order. Collective over ep.
  torch::Tensor combine(const torch::Tensor& y, const torch::Tensor& weights) const;

 private:
  EpRegion region_;
  std::int64_t tokens_ = 0, top_k_ = 0, dropped_ = 0;
  torch::Tensor order_, unorder_;  // (N·k,): sorted slot → slot (dropped slots last), and its inverse
  torch::Tensor permute_, unpermute_;  // (M,): expert-major row → received row, and its inverse (ep > 1)
  std::vector<std::int64_t> send_, recv_;  // rows to / from each ep rank
  std::vector<std::int64_t> expert_rows_;  // rows per local expert
};

/// rows (n, C) all-to-all over ep, send_rows[r] of them to rank r, recv_rows[r] arriving from
/// rank r, (Σ recv_rows, C): an autograd function whose backward is the reverse exchange.
torch::Tensor all_to_all_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                              const std::vector<std::int64_t>& recv_rows, Axis& ep);

}  // namespace gridtrain
