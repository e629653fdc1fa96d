// The step's verdict, one for the whole grid (the house plan's "scaler.unscale_and_check()").
//
// Each rank reports its share of the step — the loss it counts, Σ‖g‖² of the gradients it
// counts (still multiplied by the loss scale), whether it saw a non-finite value, whether it ran
// out of memory — and one reduction over the grid gives every rank the same verdict:
//   retry   out of memory somewhere: with train.on_oom = backoff every rank halves the
//           micro-batch and doubles accumulation (same global batch, same LR); else an error;
//   skip    a non-finite loss or gradient (the loss scaler backs off), or with
//           train.skip_outliers a loss or norm spike (precision/outlier_window.hpp); after
//           train.max_consecutive_skips skips in a row that the scaler does not explain, stop;
//   update  with the factor that unscales and clips (to optim.clip_grad) in one pass.
// So a skip or a retry never leaves ranks in different places.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gridtrain/config/config.hpp"
#include "gridtrain/precision/loss_scaler.hpp"
#include "gridtrain/precision/outlier_window.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class Axis;

/// Replicated step-loop state (loss scaler, skip counters, outlier windows) by name: fp64
/// attributes of the checkpoint group /train, the same on every rank.
using TrainState = std::vector<std::pair<std::string, std::vector<double>>>;

/// This rank's share of a step, for the verdict.
struct StepReport {
  double loss = 0;           ///< this rank's loss (nats per item over its micro-batches; 0 off the last stage)
  bool counts_loss = false;  ///< whether loss enters the global mean (one rank per replica); a
                             ///< non-finite loss is a non-finite step on any rank
  double grad_sq = 0;        ///< Σ‖g‖² over the gradients this rank counts, at the current loss scale
  bool oom = false;          ///< forward/backward ran out of memory here
};

struct Verdict {
  enum class Action { Update, Skip, Retry } action = Action::Update;
  double loss = 0;          ///< global mean training loss, nats per item (token; image)
  double norm = 0;          ///< global gradient L2 norm before clipping (unscaled)
  double grad_factor = 1;   ///< Update: multiply the gradients by this (1/scale × clip factor)
};

class StepGuard {
 public:
  /// c must outlive the guard. grid: the whole grid (the verdict's reduction); dp replicas
  /// count every parameter once each. micro_batch, accumulation: the step's starting shape.
  StepGuard(const Config& c, Axis& world, int dp, int micro_batch, int accumulation, Log& log);
  ~StepGuard();

  /// The loss multiplier of the next backward (1 without loss scaling).
  double loss_scale() const;
  /// Micro-batch and accumulation of the next step (they change after an out-of-memory back-off).
  int micro_batch() const { return micro_batch_; }
  int accumulation() const { return accumulation_; }

  /// The verdict on step `step` (0-based) from every rank's report. Collective over the grid.
  /// local_gradients: gradients were not averaged over dp (1-bit Adam after its freeze), so
  /// clipping uses this rank's own norm and the reported norm is the RMS of the ranks'.
  /// Throws gridtrain::Error to stop the run: out of memory without back-off (or nothing left to
  /// halve), or too many skips in a row.
  Verdict judge(long long step, const StepReport& mine, bool local_gradients);

  long long skipped_nonfinite() const { return skipped_nonfinite_; }
  long long skipped_outliers() const { return skipped_outliers_; }
  int oom_backoffs() const { return oom_backoffs_; }
  bool scaling() const { return scaler_ != nullptr; }

  /// For checkpoints: the skip counters, the loss scaler and the outlier windows.
  TrainState state() const;
  /// Restores state() (entries it does not know are ignored; outlier windows of another size
  /// start empty, saying so).
  void restore(const TrainState& st);

 private:
  void skip(long long step, bool nonfinite, double loss, double norm);
  void back_off(long long step, int ranks);

  const Config& cfg_;
  Axis& world_;
  int dp_;
  int micro_batch_, accumulation_;
  Log& log_;
  std::unique_ptr<LossScaler> scaler_;                        // null: no loss scaling
  std::unique_ptr<OutlierWindow> loss_window_, norm_window_;  // null: train.skip_outliers = false
  long long skipped_nonfinite_ = 0, skipped_outliers_ = 0;
  long long stuck_ = 0;  // skips in a row the loss scaler does not explain
  int oom_backoffs_ = 0;
};

}  // namespace gridtrain
