// State besides the parameters that every dp replica keeps for itself and that the replicas
// average after each update (Model::replica_state: batch-norm running statistics, each replica's
// EMA of its own micro-batches' statistics, as DDP without SyncBatchNorm), so that they stay
// equal. A step that does not update (skipped, retried) puts the values from before it back.
#pragma once
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class ReplicaState {
 public:
  /// tensors: fp32, updated in place by the model (held, not copied); empty: nothing to do.
  ReplicaState(std::vector<torch::Tensor> tensors, Axis& dp) : tensors_(std::move(tensors)), dp_(dp) {}
  /// Copies of the tensors now (before a step's forwards).
  std::vector<torch::Tensor> snapshot() const;
  /// Puts a snapshot back (a step that does not update leaves no trace in them either).
  void restore(const std::vector<torch::Tensor>& saved);
  /// Averages the tensors over dp in one allreduce. Collective over dp.
  void average();

 private:
  std::vector<torch::Tensor> tensors_;
  Axis& dp_;
};

}  // namespace gridtrain
