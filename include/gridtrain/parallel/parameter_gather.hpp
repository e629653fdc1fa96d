// What a model sees of ZeRO stage 3 (sharded parameters): its parameters are grouped into units
// (a transformer block, an embedding), and a unit's parameters hold their values only around its
// use. The model calls gather() before a unit's forward and release() after it; release() also
// arranges, through a hook on the unit's output gradient, that the unit is gathered again before
// backward reaches it. The Reducer implements it (parallel/reducer.hpp); without ZeRO stage 3 a
// model has no ParameterGather and its parameters are always whole.
#pragma once
#include <torch/torch.h>

namespace gridtrain {

class ParameterGather {
 public:
  virtual ~ParameterGather() = default;
  /// Before unit `unit`'s forward: waits until its parameters hold their values (starting their
  /// all-gather if it is not in flight), and may start the next unit's (prefetch).
  virtual void gather(int unit) = 0;
  /// After unit `unit`'s forward produced `out`: frees the unit's parameters unless `keep` (the
  /// forward uses them again, as the tied output head uses the token embedding), and, when out
  /// requires grad, hooks out's gradient to gather the unit before its backward. Returns out.
  virtual torch::Tensor release(int unit, const torch::Tensor& out, bool keep) = 0;
};

}  // namespace gridtrain
