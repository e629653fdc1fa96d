// The end of a run, as LAMMPS' Finish::end is to Verlet::run: the loop time, performance
// (tokens/s, samples/s, MFU), the MPI task timing breakdown, the gradient exchange that really
// happened, bytes per axis, checkpoints, stability and memory, and the final validation loss.
// With it the throughput accounting that the thermo lines and the summary share.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/util/log.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

class Checkpointer;
class ParameterGroups;
class StepGuard;

/// Training throughput: tokens/s, wall ms per step and MFU over the whole loop and over each
/// thermo interval (validation excluded). MFU = FLOPs per step (ModelPlan::flops_per_item × items;
/// for the GPT 6N + 12LCT per token, PaLM, Chowdhery et al. 2022, App. B) × steps / seconds / the
/// peak summed over ranks.
class Throughput {
 public:
  struct Rate {
    double items_per_s = 0, step_ms = 0, mfu = 0;
  };
  /// Per step over the whole grid: tokens and training FLOPs; peak_flops: FLOP/s summed over
  /// ranks. The first interval starts now.
  Throughput(double items_per_step, double flops_per_step, double peak_flops);
  void step() { ++interval_steps_; }
  /// Seconds of the current interval that were not training (validation).
  void exclude(double seconds) { excluded_s_ += seconds; }
  /// The rate since the previous interval() or construction; starts the next interval.
  Rate interval();
  /// The rate of `steps` steps in `seconds`.
  Rate over(long long steps, double seconds) const;

 private:
  double items_per_step_, flops_per_step_, peak_flops_;
  Stopwatch interval_;
  long long interval_steps_ = 0;
  double excluded_s_ = 0;
};

/// What a run produced (Trainer::run's result, which the summary reports).
struct RunResult {
  int stop_signal = 0;             ///< the signal that stopped the run before its last step, or 0
  bool checkpointed = false;       ///< whether a checkpoint was saved when it stopped
  std::vector<double> losses;      ///< global mean training loss per step run, nats per item (token; image)
  std::vector<double> grad_norms;  ///< global gradient norm per step (before clipping)
  std::optional<double> final_val_loss;      ///< nats per item
  std::optional<double> final_val_accuracy;  ///< classifiers: top-1 fraction correct
  std::vector<double> final_val_per_dataset;  ///< a blend's: each dataset's (Samples::datasets order)
  long long skipped = 0;    ///< updates skipped (non-finite or outlier), including before a resume
  double loss_scale = 1.0;  ///< dynamic loss scale at the end (1 without loss scaling)
  double loop_s = 0;        ///< wall seconds of the step loop
  double items_per_s = 0;  ///< global training items (tokens; images) / loop_s
  double mfu = 0;           ///< fraction of the summed per-rank peak
};

/// What else the summary reports about this rank's run.
/// Bytes of this rank's model state (the memory accountant: the tensors the model, the Reducer
/// and the optimizer hold), now and the most held at once during the run.
struct StateBytes {
  double params = 0, params_peak = 0, grads = 0, grads_peak = 0, optimizer = 0;
  double fixes = 0;  ///< what the step fixes hold (sparsity masks, ...)
  double total() const { return params + grads + optimizer + fixes; }
  double peak() const { return params_peak + grads_peak + optimizer + fixes; }
};

/// What a step fix (app/fix.hpp) adds to the end-of-run report: text printed after the memory
/// table (starting with a blank line, ending with a newline) and one member of summary.json,
/// `"json_key": json` (json: any JSON value).
struct ReportSection {
  std::string text;
  std::string json_key;
  std::string json;
};

struct RunCounters {
  double peak_gflops = 0;                     ///< this rank's peak
  std::string peak_source;                    ///< where it came from (plan/peak.hpp)
  std::vector<std::uint64_t> bytes_sent{};    ///< this rank's training traffic per grid axis (kAxes order)
  int cuda_device = -1;                       ///< the rank's CUDA device, or -1 on the CPU
  std::size_t val_samples = 0;                ///< validation samples per pass
  StateBytes state;                           ///< this rank's model state at the end
  std::string item = "token";                 ///< what throughput counts (ModelPlan::item)
  double items_per_sample = 1;                ///< ModelPlan::items_per_sample
  std::vector<ReportSection> fixes = {};      ///< the step fixes' sections, in their order
  /// This rank's PipelineEngine::PassSeconds: seconds in forwards F, backwards B and weight
  /// gradients W (zb-h1), and the micro-batches.
  std::array<double, 4> pass_s{};
};

/// What the end-of-run report reads: the run's result and counters and the parts of the Trainer
/// that kept the rest (the timer's sections, the exchange, checkpoints, the step guard's skips).
struct SummaryInputs {
  const RunResult& run;
  const RunCounters& counters;
  const Config& config;
  const Timer& timer;
  const ParameterGroups& groups;  ///< each group's gradient exchange
  const Checkpointer& checkpointer;
  const StepGuard& guard;
  Grid& grid;
};

/// Prints the end-of-run report on rank 0 and writes its numbers to <output.dir>/summary.json
/// (layout, steps, loop_s, step_s, items_per_s, mfu, sections_s: the breakdown's average seconds
/// per section over the run, bytes_per_step per axis, final validation figures). Collective over
/// the grid (reductions over ranks).
void print_summary(const SummaryInputs& in, Log& log);

}  // namespace gridtrain
