// Step fixes, as LAMMPS' Fix and Modify: a feature that is not the training step itself (sparse
// training, fault injection, the batch-norm replica state) runs at named points of the step and
// owns its state, checkpoint group, report columns and setup lines. The Trainer calls the points
// through Fixes; at each point the fixes run in the order make_fixes lists them.
//
// The points of one step s (0-based), each with what may run there:
//   step_begin      host, before the step's data; no collective (not every rank need act)
//   before_forward  collectives over the grid allowed (every rank reaches it); may throw
//                   std::bad_alloc, which takes the step's out-of-memory path (a retry)
//   on_loss         on the last stage, inside the stage forward: device operations only (no host
//                   synchronisation: debug.sync_check); returns the loss backward starts from
//   after_exchange  after the gradient exchange and the tied-embedding sum, before the global norm:
//                   what it does to the gradients is what the norm, clipping and update see
//   after_update    after the optimizer's update, before the weights are published (2-byte weights,
//                   ZeRO's all-gather): host work and collectives allowed
//   on_skip         instead of after_update when the step does not update (skipped, retried)
//   columns/summary the thermo line's and the end-of-run report's figures (collective: every rank)
//   state_bytes     the memory accountant: bytes the fix holds on this rank
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/output/summary.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class Fix {
 public:
  virtual ~Fix() = default;
  /// The setup report's lines and warnings.
  virtual void describe(Log&) const {}
  virtual void step_begin(long long /*s*/) {}
  virtual void before_forward(long long /*s*/) {}
  /// loss: a micro-batch's summed loss, a 0-d tensor on the device.
  virtual torch::Tensor on_loss(long long /*s*/, torch::Tensor loss) { return loss; }
  /// grads[i]: the reduced gradient of the model's parameter i as this rank holds it (the
  /// tp-local tensor, or its ZeRO piece; empty where it holds none), any float dtype.
  virtual void after_exchange(long long /*s*/, const std::vector<torch::Tensor>& /*grads*/) {}
  virtual void after_update(long long /*s*/) {}
  virtual void on_skip(long long /*s*/) {}
  virtual void columns(std::vector<ReportColumn>& /*out*/) {}
  virtual void summary(std::vector<ReportSection>& /*out*/, const std::string& /*item*/) {}
  virtual double state_bytes() const { return 0; }
};

/// What a fix may hold on to: the Trainer's parts, which outlive it.
struct FixContext {
  const Config& cfg;
  Grid& grid;
  Model& model;
  Optimizer& optimizer;
  Checkpointer& checkpointer;
  /// The optimizer's parameters in the model's order: fp32 whole tp-local tensors, ZeRO pieces
  /// (flat views with shape and offset, disjoint over dp when pieces_split_over_dp) or masters.
  const std::vector<NamedParameter>& pieces;
  bool pieces_split_over_dp;
  /// The step's activation bytes at the current micro-batch plus the model state's peak: what
  /// debug.alloc_limit_mb compares.
  std::function<double()> step_bytes;
};

/// The fixes the deck asks for, in the order they run at every point: fault injection (so that a
/// poisoned gradient is masked like any other), sparse training, the MoE router statistics and
/// expert bias, the batch-norm replica state.
/// Collective over ctx.grid.world(). Throws what a fix's constructor throws (gridtrain::Error for
/// a deck it cannot run).
std::vector<std::unique_ptr<Fix>> make_fixes(const FixContext& ctx);

/// Modify: the run's fixes, each point called on every fix in order.
class Fixes {
 public:
  Fixes() = default;
  explicit Fixes(std::vector<std::unique_ptr<Fix>> fixes) : fixes_(std::move(fixes)) {}
  void describe(Log& log) const;
  void step_begin(long long s);
  void before_forward(long long s);
  torch::Tensor on_loss(long long s, torch::Tensor loss);
  void after_exchange(long long s, const std::vector<torch::Tensor>& grads);
  void after_update(long long s);
  void on_skip(long long s);
  std::vector<ReportColumn> columns();
  std::vector<ReportSection> summary(const std::string& item);
  double state_bytes() const;
  /// The fix of type F, or null (for tests and tools).
  template <class F>
  F* find() const {
    for (const auto& f : fixes_)
      if (auto* hit = dynamic_cast<F*>(f.get())) return hit;
    return nullptr;
  }

 private:
  std::vector<std::unique_ptr<Fix>> fixes_;
};

}  // namespace gridtrain
