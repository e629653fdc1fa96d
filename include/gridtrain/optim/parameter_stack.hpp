// The parameters of record and the step's one update path over them: load_gradients (the
// gradients the optimizer reads, times the step's unscale-and-clip factor), the optimizer's
// update, publish (the updated values to the weights the model computes with).
//   fp32 weights:   the factor scales the Reducer's reduced gradients in place (skipped at 1);
//                   the optimizer updates the weights, or their ZeRO pieces, themselves.
//   2-byte weights: fp32 masters (optim/master_weights.hpp) take the widened gradients times the
//                   factor, in fp32; the optimizer updates the masters, which publish rounds
//                   into the weights.
// publish then all-gathers every rank's updated pieces (ZeRO stages 1–2).
#pragma once
#include <cstdint>
#include <memory>

#include "gridtrain/optim/master_weights.hpp"
#include "gridtrain/parallel/reducer.hpp"
#include "gridtrain/parallel/sharded_parameters.hpp"

namespace gridtrain {

class ParameterStack {
 public:
  /// masters: precision.weights = bf16 | fp16; null with fp32 weights. The reducer and the
  /// parameters must outlive the stack.
  ParameterStack(Reducer& reducer, ShardedParameters& parameters, std::unique_ptr<MasterWeights> masters)
      : reducer_(reducer), parameters_(parameters), masters_(std::move(masters)) {}
  /// Before the optimizer's update: the gradients it reads, multiplied by factor.
  void load_gradients(double factor);
  /// After an update, or after a checkpoint was loaded into the parameters of record.
  /// Collective over dp (ZeRO stages 1–2).
  void publish();
  /// The fp32 masters; null with fp32 weights.
  const MasterWeights* masters() const { return masters_.get(); }
  /// Bytes of the masters on this rank (sharded with the optimizer state); 0 with fp32 weights.
  std::uint64_t master_bytes() const { return masters_ ? masters_->bytes() : 0; }

 private:
  Reducer& reducer_;
  ShardedParameters& parameters_;
  std::unique_ptr<MasterWeights> masters_;
};

}  // namespace gridtrain
