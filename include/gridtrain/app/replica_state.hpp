// State besides the parameters that every dp replica keeps for itself and that the replicas
// average after each update (Model::replica_state: batch-norm running statistics, each replica's
// EMA of its own micro-batches' statistics, as DDP without SyncBatchNorm), so that they stay
// equal. A step fix (app/fix.hpp): a step that does not update (skipped, retried) puts the
// values from before it back.
#pragma once
#include <vector>

#include <torch/torch.h>

#include "gridtrain/app/fix.hpp"
#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class ReplicaState final : public Fix {
 public:
  /// tensors: fp32, updated in place by the model (held, not copied); non-empty.
  ReplicaState(std::vector<torch::Tensor> tensors, Axis& dp) : tensors_(std::move(tensors)), dp_(dp) {}
  /// Copies the tensors (before anything of the step can fail).
  void step_begin(long long s) override;
  /// Averages the tensors over dp in one allreduce. Collective over dp.
  void after_update(long long s) override;
  /// Puts the copy back: a step that does not update leaves no trace in them either.
  void on_skip(long long s) override;

 private:
  std::vector<torch::Tensor> tensors_, before_;
  Axis& dp_;
};

}  // namespace gridtrain
