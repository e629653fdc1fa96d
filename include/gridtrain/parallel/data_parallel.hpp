// The data-parallel side of a model's parameters over grid.dp(): one BucketLayout, ZeRO's
// parameter storage (parallel/sharded_parameters.hpp) and the gradient Reducer
// (parallel/reducer.hpp) built on it and wired together, plus what needs both: each rank's
// piece of every parameter, with its gradient, for the optimizer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/parallel/bucket_layout.hpp"
#include "gridtrain/parallel/reducer.hpp"
#include "gridtrain/parallel/sharded_parameters.hpp"

namespace gridtrain {

/// How parameters are sharded over dp (ZeRO: Rajbhandari et al. 2020).
struct ZeroOptions {
  int stage = 0;  ///< 0..3; needs compression = None; with dp = 1 there is nothing to shard: 0
  /// Per parameter (registration order; missing: -1) its unit, or -1 for none
  /// (parallel/bucket_layout.hpp). Stage 3 needs every parameter in a unit (the model's
  /// unit_of); below it the tied embedding is one, so that its gradient shard covers the same
  /// elements on both pipeline stages that hold it.
  std::vector<int> unit_of = {};
  bool prefetch = true;  ///< stage 3: gathering unit u starts the all-gather of the unit used next
};

/// This rank's piece of one parameter under ZeRO: elements [offset, offset + param.numel()) of
/// the parameter flattened. param is a 1-D view into the flat parameter bucket (the optimizer
/// updates it in place) whose .grad is a view into the gradient shard; empty where the
/// parameter lies outside the rank's shard.
struct ShardPiece {
  torch::Tensor param;
  std::int64_t offset = 0;
};

class DataParallel {
 public:
  /// params in registration order; bucket_mb > 0 (MiB). Throws std::invalid_argument for ZeRO
  /// with compression, and for units that break the rules of ZeroOptions.
  DataParallel(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap,
               Compression compression = Compression::None, const ZeroOptions& zero = {});

  /// ZeRO stage in effect (0: none, or dp = 1).
  int zero_stage() const { return stage_; }
  /// ZeRO: this rank's piece of each parameter, in parameter order.
  std::vector<ShardPiece> shard_pieces() const;
  /// Σ‖g‖² over the reduced gradients of parameters `counted` (under ZeRO this rank's pieces of
  /// them), a 0-d fp64 tensor on `device`, left there; scaled so that its sum over the dp ranks
  /// counts every element dp times, with ZeRO (each rank holds 1/dp: × dp) or without.
  torch::Tensor gradient_sq(const std::vector<std::size_t>& counted, torch::Device device) const;
  /// Parameter storage; also the ParameterGather the model calls at stage 3.
  ShardedParameters& parameters() { return parameters_; }
  const ShardedParameters& parameters() const { return parameters_; }
  Reducer& reducer() { return reducer_; }
  const Reducer& reducer() const { return reducer_; }

 private:
  std::vector<torch::Tensor> params_;
  Axis& dp_;
  int stage_;
  std::shared_ptr<const BucketLayout> layout_;
  ShardedParameters parameters_;
  Reducer reducer_;
};

}  // namespace gridtrain
