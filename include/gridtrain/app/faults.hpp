// Fault injection ([debug] keys), for the tests of the failure paths: a rank late to step 2, a
// NaN loss or an Inf gradient on one rank for some steps, a micro-batch that does not fit a
// memory budget, a rank (and its node's memory, and its partner) killed, a straggler. A step fix (app/fix.hpp): each fault happens at the point of the step where it
// would happen in a real run.
#pragma once
#include <functional>

#include "gridtrain/app/fix.hpp"

namespace gridtrain {

class Checkpointer;

class Faults final : public Fix {
 public:
  /// Whether the deck injects any of these faults (debug.stall_rank, nonfinite, alloc_limit_mb,
  /// kill_rank, slow_rank).
  static bool wanted(const Config::Debug& debug);
  /// world: the grid, over which the out-of-memory fault is decided; step_bytes: what
  /// debug.alloc_limit_mb limits (FixContext::step_bytes); checkpointer: whose local parts a
  /// killed node loses, and its partners.
  Faults(const Config::Debug& debug, Axis& world, std::function<double()> step_bytes, Checkpointer& checkpointer);
  /// debug.stall_rank: sleeps debug.stall_s on that rank at the start of step 2 (s == 1).
  /// debug.kill_rank (and its partner with kill_partner): SIGKILL at the start of the step after
  /// debug.kill_step in a run that started at step 0, after deleting the local parts the rank
  /// holds with kill_memory.
  void step_begin(long long s) override;
  /// debug.slow_rank: sleeps debug.slow_s there, inside the step's compute (a straggler).
  /// debug.alloc_limit_mb: throws std::bad_alloc when the step needs more. Decided over the grid,
  /// as the out-of-memory flag is: with pp > 1 only the last stage's estimate includes the
  /// logits, and a stage that failed alone would leave its neighbours waiting. Collective.
  void before_forward(long long s) override;
  /// debug.nonfinite = loss: the loss plus NaN on debug.nonfinite_rank.
  torch::Tensor on_loss(long long s, torch::Tensor loss) override;
  /// debug.nonfinite = grad: an Inf in the first gradient element the rank holds, which the
  /// global finite check must catch on every rank.
  void after_exchange(long long s, const std::vector<torch::Tensor>& grads) override;

 private:
  bool hits(NonfiniteFault kind, long long step) const {
    return d_.nonfinite == kind && rank_ == d_.nonfinite_rank && step + 1 >= d_.nonfinite_step &&
           step + 1 < d_.nonfinite_step + d_.nonfinite_steps;
  }
  const Config::Debug& d_;
  Axis& world_;
  int rank_;
  std::function<double()> step_bytes_;
  Checkpointer& checkpointer_;
  long long first_step_ = -1;  // the step this run started from
};

}  // namespace gridtrain
