// The training run: builds grid → data → model → reducer → optimizer from a validated Config and
// runs the step loop. Collective over the world communicator it is given (tests pass
// MPI_COMM_SELF to get a 1-rank reference run inside an MPI job).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include <mpi.h>

#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/optim/loss_scaler.hpp"
#include "gridtrain/optim/lr_schedule.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/optim/outlier_guard.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/parallel/reducer.hpp"
#include "gridtrain/util/log.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

/// The grid shape for c on world, with the model and options checked against it. Throws
/// gridtrain::Error naming the keys (n_head not divisible by tp, more stages than layers, a bad
/// grid.stage_layers, options that need tp = pp = 1).
GridShape trainable_shape(const Config& c, MPI_Comm world);
/// Micro-batches per step and dp rank: global = micro × dp × accumulation. Throws
/// gridtrain::Error when train.global_batch is not a multiple of micro_batch · dp.
int accumulation_steps(const Config& c, int dp);
/// This rank's part of the model on grid: its tp axis, stage, and layers (grid.stage_layers).
ModelLayout model_layout(const Config& c, Grid& grid);

struct RunResult {
  int stop_signal = 0;             ///< the signal that stopped the run before its last step, or 0
  bool checkpointed = false;       ///< whether a checkpoint was saved when it stopped
  std::vector<double> losses;      ///< global mean training loss per step run, nats/token
  std::vector<double> grad_norms;  ///< global gradient norm per step (before clipping)
  std::optional<double> final_val_loss;
  long long skipped = 0;    ///< updates skipped (non-finite or outlier), including before a resume
  double loss_scale = 1.0;  ///< dynamic loss scale at the end (1 without loss scaling)
  double loop_s = 0;        ///< wall seconds of the step loop
  double tokens_per_s = 0;  ///< global training tokens / loop_s
  double mfu = 0;           ///< fraction of the summed per-rank peak
};

class Trainer {
 public:
  /// Collective over world. Throws gridtrain::Error for problems every rank sees (grid shape,
  /// batch arithmetic, dataset); peak_gflops is this rank's peak for MFU.
  Trainer(const Config& cfg, MPI_Comm world, Log& log, double peak_gflops);
  ~Trainer();

  /// Runs train.steps steps, printing thermo lines, then the end-of-run summary. Collective.
  RunResult run();

  LanguageModel& model() { return *model_; }
  Grid& grid() { return *grid_; }
  /// Mean validation loss over the fixed validation subset, nats/token, forward through the
  /// pipeline. Collective over the grid.
  double evaluate();
  int accumulation() const { return accum_; }
  Optimizer& optimizer() { return *optimizer_; }
  /// Steps completed before run() starts (non-zero after a resume).
  long long start_step() const { return start_step_; }
  /// Global index of the next training sample (the data position).
  std::uint64_t sample_index() const { return sample_index_; }

 private:
  struct StepOutcome {
    double loss = 0, norm = 0;  ///< global mean loss (nats/token), gradient norm before clipping
    bool retry = false;         ///< out of memory and backed off: run the step again
  };
  StepOutcome train_step(long long s, double lr);
  void skip(long long s, const char* why, double loss, double norm);
  StepOutcome back_off(long long s, int ranks);
  /// Runs this stage's part of step s's micro-batches in train.schedule order (backward from
  /// loss · loss_scale) and returns, on the last stage, the sum of their losses, each the
  /// micro-batch's mean / accumulation (0 elsewhere); reads the global batch that starts at
  /// sample_index_. Throws std::bad_alloc / c10::OutOfMemoryError when out of memory.
  double forward_backward(long long s, double loss_scale);
  /// Whether [debug] fault injection of kind `what` (loss | grad) applies to this rank at step s.
  bool injects(const std::string& what, long long s) const;
  /// Σ ||g||² over the gradients this rank counts toward the global norm.
  double counted_grad_sq() const;
  std::uint64_t pp_bytes_sent() const;
  TrainState train_state() const;
  void restore(const TrainState& st);
  /// Fills a (rows, T+1) batch from the sampler for global sample indices first..first+rows-1.
  torch::Tensor train_batch(std::uint64_t first, int rows);
  void print_summary(const RunResult& r);

  Config cfg_;
  Log& log_;
  double peak_gflops_;
  std::unique_ptr<Grid> grid_;
  std::unique_ptr<Axis> tied_;  // first and last pipeline stage (pp > 1 only): the tied wte
  torch::Tensor tied_weight_;   // wte.weight on those two stages
  torch::Device device_{torch::kCPU};  // train.device, resolved
  int accum_ = 1;
  TokenData data_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<std::uint64_t> val_starts_;  // this dp rank's share of the validation subset
  std::size_t val_total_ = 0;
  std::shared_ptr<LanguageModel> model_;
  std::vector<torch::Tensor> counted_;  // parameters whose gradients this rank counts in the norm
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  long long start_step_ = 0;
  std::uint64_t sample_index_ = 0;  // global sample index of the next step's first sample
  double total_comm_s_ = 0, exposed_comm_s_ = 0;  // gradient allreduce: in flight, waited for
  int compute_bytes_ = 4;                     // bytes per activation element at precision.type
  std::unique_ptr<LossScaler> scaler_;        // null: no loss scaling
  std::unique_ptr<OutlierWindow> loss_window_, norm_window_;  // null: train.skip_outliers = false
  long long skipped_nonfinite_ = 0, skipped_outliers_ = 0;
  long long stuck_ = 0;  // non-finite steps in a row at the minimum loss scale (or without one)
  int oom_backoffs_ = 0;
  std::uint64_t dp_bytes_ = 0;                     // sent on dp by this rank (gradients, 1-bit momentum)
  std::uint64_t tp_bytes_ = 0, pp_bytes_ = 0;      // sent on tp / pp (with the tied embedding) in training steps
  Timer timer_;
};

}  // namespace gridtrain
