// Fault injection ([debug] keys), for the tests of the failure paths: a rank late to step 2, a
// NaN loss or an Inf gradient on one rank for some steps, a micro-batch that does not fit a
// memory budget. Each question is asked at the place in the step where the fault would happen.
#pragma once
#include "gridtrain/config/config.hpp"

namespace gridtrain {

class Axis;

class Faults {
 public:
  /// world_rank: this rank in the grid (= world) communicator.
  Faults(const Config::Debug& debug, int world_rank) : d_(debug), rank_(world_rank) {}
  /// debug.stall_rank: sleeps debug.stall_s on that rank at the start of step 2 (step == 1).
  void stall(long long step) const;
  /// debug.nonfinite = loss | grad on this rank at step (0-based).
  bool nan_loss(long long step) const { return hits(NonfiniteFault::Loss, step); }
  bool inf_gradient(long long step) const { return hits(NonfiniteFault::Grad, step); }
  /// debug.alloc_limit_mb: whether a step that needs `bytes` (the micro-batch's estimated
  /// activations plus the model state's measured peak) fails as out of memory. Decided over the grid, as the out-of-memory flag is: with pp > 1 only
  /// the last stage's estimate includes the logits, and a stage that failed alone would leave
  /// its neighbours waiting. Collective over grid when the limit is set.
  bool over_memory_budget(double bytes, Axis& world) const;

 private:
  bool hits(NonfiniteFault kind, long long step) const {
    return d_.nonfinite == kind && rank_ == d_.nonfinite_rank && step + 1 >= d_.nonfinite_step &&
           step + 1 < d_.nonfinite_step + d_.nonfinite_steps;
  }
  const Config::Debug& d_;
  int rank_;
};

}  // namespace gridtrain
