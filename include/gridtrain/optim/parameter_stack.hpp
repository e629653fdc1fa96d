// The parameters of record, from the model's tensors to what the optimizer updates, and the
// step's one update path over them.
//
// The stack: the model's parameters (fp32, or 2-byte: precision.weights = bf16 | fp16), their
// data-parallel side per parameter group (parallel/parameter_groups.hpp: each group's buckets,
// ZeRO's storage and gradient Reducer over its axis),
// and the pieces the optimizer updates: each whole tp-local tensor, its ZeRO piece, or the fp32
// master of either (optim/master_weights.hpp; Micikevicius et al. 2018).
//
// The update path: load_gradients (the gradients the optimizer reads, times the step's
// unscale-and-clip factor), the optimizer's update, publish (the updated values to the weights
// the model computes with).
//   fp32 weights:   the factor scales the reduced gradients in place (skipped at 1); the optimizer
//                   updates the weights, or their ZeRO pieces, themselves.
//   2-byte weights: the masters take the widened gradients times the factor, in fp32; the
//                   optimizer updates the masters, which publish rounds into the weights.
// publish then all-gathers every rank's updated pieces (ZeRO stages 1–2).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/master_weights.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/parallel/parameter_groups.hpp"

namespace gridtrain {

class ParameterStack {
 public:
  /// model: on its device, its parameters in their final dtype. groups: the parameter groups
  /// and group_of, the index into them of each of the model's parameters by name (the Trainer's
  /// one group: "dense" over dp). dp: the whole data-parallel axis. initial: with 2-byte weights,
  /// every parameter's fp32 value (whole, in the model's order) for the masters; empty for fp32
  /// weights. tp_rank: this rank on tp (which parameters count toward the norm). Collective over
  /// every group's axis. Throws std::logic_error when the model's tied_parameters names one this
  /// rank lacks, std::invalid_argument for 1-bit Adam with more than one group (it exchanges its
  /// state over dp), and what ParameterGroups throws. The model is told its stage-3 gather
  /// (Model::set_parameter_gather).
  ParameterStack(const Config& cfg, Model& model, std::vector<ParameterGroup> groups,
                 const std::function<std::size_t(const std::string&)>& group_of, const Axis& dp, int tp_rank,
                 const std::vector<torch::Tensor>& initial);

  /// What the optimizer updates, in the model's parameter order, with their .grad.
  const std::vector<NamedParameter>& pieces() const { return pieces_; }
  /// Whether the pieces are ZeRO pieces (disjoint over their group's axis) rather than whole tensors.
  bool pieces_split_over_dp() const { return groups_->any_sharded(); }
  ParameterGroups& groups() { return *groups_; }
  const ParameterGroups& groups() const { return *groups_; }
  /// The reduced gradient of every model parameter as this rank holds it (Reducer::reduced_gradient).
  std::vector<torch::Tensor> reduced_gradients() const;
  /// Indices of Model::tied_parameters() on this rank, in that order.
  const std::vector<std::size_t>& tied() const { return tied_; }
  /// Σ‖g‖² over the gradients this rank counts toward the global norm (each tp-sharded element
  /// once over tp: ShardSpec::counted_on, each group weighted by its convention), a 0-d fp64
  /// tensor on `device` (ParameterGroups::gradient_sq).
  torch::Tensor gradient_sq(torch::Device device) const { return groups_->gradient_sq(counted_, device); }

  /// Before the optimizer's update: the gradients it reads, multiplied by factor.
  void load_gradients(double factor);
  /// After an update, or after a checkpoint was loaded into the pieces. Collective over every
  /// group's axis.
  void publish();
  /// The fp32 masters; null with fp32 weights.
  const MasterWeights* masters() const { return masters_.get(); }
  /// Bytes of the masters on this rank (sharded with the optimizer state); 0 with fp32 weights.
  std::uint64_t master_bytes() const { return masters_ ? masters_->bytes() : 0; }

 private:
  std::unique_ptr<ParameterGroups> groups_;
  std::unique_ptr<MasterWeights> masters_;
  std::vector<NamedParameter> pieces_;
  std::vector<std::size_t> counted_, tied_;
};

}  // namespace gridtrain
