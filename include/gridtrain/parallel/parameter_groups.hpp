// Gradient reduction per parameter group: the parameters are partitioned into groups, each
// reduced (and, under ZeRO, sharded) over its own axis by a DataParallel of its own
// (parallel/data_parallel.hpp). Dense parameters reduce over dp (dp × cp with G23's context axis);
// G22's experts over expert-data-parallel, a split of dp (Axis::split) whose complement, expert
// parallel, holds different experts.
//
// The global gradient norm's convention (gradient_sq): the step guard sums every rank's Σ‖g‖²
// over the grid and divides by dp, so each group scales its sum so that every one of its elements
// is counted dp times over the dp axis. A group over an axis of a ranks (a divides dp) holds each
// element on a ranks of its axis, or on one under ZeRO, and there are dp / a such axes in a dp
// line, each holding different elements: its weight is dp / a, times a under ZeRO. With the one
// dense group over dp both factors are those DataParallel::gradient_sq has always applied.
//
// Gradients: each group's are 1/dp of their sum over the grid's data, whatever its axis's size:
// an expert on one ep rank computes rows from every ep rank's micro-batch, so its gradient summed
// over the expert-data-parallel ranks covers the whole dp line's tokens, of which the loss is the
// mean (Megatron-Core scales expert gradients the same way, by 1/dp not 1/edp).
//
// Every operation runs over the groups in group order, so the ranks of each group's axis issue
// the same sequence of collectives on it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/parallel/data_parallel.hpp"
#include "gridtrain/parallel/parameter_gather.hpp"

namespace gridtrain {

/// A data-parallel parameter group: its name ("dense"; G22: "expert") and the axis over which
/// its gradients are averaged and ZeRO shards it.
struct ParameterGroup {
  std::string name;
  Axis* axis = nullptr;
};

/// ZeRO stage 3 through every group: a unit (a transformer block) may have parameters in
/// several (an MoE block's dense ones over dp, its experts over expert dp), and gather() and
/// release() act on each group that holds it, in group order.
class ParameterGroups : public ParameterGather {
 public:
  /// params in the model's order; group_of[i] indexes groups for parameter i. dp: the whole
  /// data-parallel axis; each group's axis is dp or a split of it whose size divides dp's.
  /// Collective over every group's axis. Throws std::invalid_argument when group_of and params
  /// differ in length or name a group that does not exist, when a group is empty or its axis does
  /// not divide dp, and what DataParallel throws.
  ParameterGroups(const std::vector<torch::Tensor>& params, const std::vector<std::size_t>& group_of,
                  std::vector<ParameterGroup> groups, const Axis& dp, double bucket_mb, bool overlap,
                  Compression compression, const ZeroOptions& zero);

  std::size_t size() const { return groups_.size(); }
  const ParameterGroup& spec(std::size_t k) const { return groups_.at(k); }
  DataParallel& group(std::size_t k) { return *data_parallel_.at(k); }
  const DataParallel& group(std::size_t k) const { return *data_parallel_.at(k); }
  /// ZeRO stage in effect in group 0 (the same deck stage in all; 0 where a group's axis has one rank).
  int zero_stage() const { return data_parallel_.front()->zero_stage(); }
  /// Whether any group's pieces are ZeRO pieces (disjoint over its axis) rather than whole tensors.
  bool any_sharded() const;

  // The step, in every group (Reducer's operations of the same names; finish() averages each
  // group's gradients over dp as above).
  void zero_grad(bool local_gradients);
  void begin_backward(bool last);
  void finish();
  void scale(double factor);
  /// ZeRO stages 1–2: every group's updated pieces to every rank of its axis.
  void all_gather();
  /// ZeRO stage 3: frees every gathered unit.
  void release_all();
  /// ZeRO stage 3: every group's units gathered (WholeParameters). A no-op below it.
  void gather_all();
  // ParameterGather (stage 3; the model's one).
  void gather(int unit) override;
  torch::Tensor release(int unit, const torch::Tensor& out, bool keep) override;
  /// This step's exchange (the same in every group: it follows the deck and the optimizer).
  GradExchange exchange() const { return data_parallel_.front()->reducer().exchange(); }

  /// Parameter i's reduced gradient (Reducer::reduced_gradient of its group).
  torch::Tensor reduced_gradient(std::size_t i) const;
  /// Each parameter's ZeRO piece in its group (DataParallel::shard_pieces), in parameter order;
  /// an undefined param where its group is not sharded (ZeRO stage 0, or an axis of one rank).
  std::vector<ShardPiece> shard_pieces() const;
  /// Σ‖g‖² over the reduced gradients of parameters `counted`, weighted per group by the
  /// convention above: a 0-d fp64 tensor on `device`.
  torch::Tensor gradient_sq(const std::vector<std::size_t>& counted, torch::Device device) const;

  /// Bytes this rank holds now in gradients and parameters, over all groups; the peaks are the
  /// sum of each group's peak (an upper bound of the peak of the sum).
  std::uint64_t gradient_bytes() const;
  std::uint64_t gradient_peak_bytes() const;
  std::uint64_t parameter_bytes() const;
  std::uint64_t parameter_peak_bytes() const;
  std::size_t bucket_count() const;

 private:
  template <class F>
  std::uint64_t sum(F f) const {  // f's figure summed over the groups
    std::uint64_t n = 0;
    for (const auto& d : data_parallel_) n += f(*d);
    return n;
  }

  struct Place {
    std::size_t group, index;  // parameter i is parameter `index` of group `group`
  };
  std::vector<ParameterGroup> groups_;
  std::vector<std::unique_ptr<DataParallel>> data_parallel_;
  std::vector<Place> place_;
  std::vector<int> weight_;  // per group: dp / axis size (the norm convention)
};

}  // namespace gridtrain
