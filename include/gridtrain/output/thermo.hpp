// Thermo output (rank 0): a header row once, then one fixed-width line every output.thermo steps,
// mirrored as one JSON object per line into <output.dir>/metrics.jsonl and, with
// output.tensorboard, as TensorBoard scalars (output/tensorboard.hpp); and the estimate of the
// time remaining that the lines carry (LAMMPS' cpuremain).
#pragma once
#include <array>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gridtrain/output/goodput.hpp"
#include "gridtrain/output/stragglers.hpp"
#include "gridtrain/output/tensorboard.hpp"
#include "gridtrain/util/log.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

/// A figure a step fix (app/fix.hpp) adds to each thermo line: in metrics.jsonl as `key`, in
/// TensorBoard as `tag` (when given), and on the printed line under `header` (when given) as
/// `shown` with two decimals, right-aligned.
struct ReportColumn {
  std::string key;
  double value = 0;
  std::string tag = {};
  std::string header = {};
  double shown = 0;
};

struct ThermoRow {
  long long step = 0;                   ///< optimizer steps completed
  double loss = 0;                      ///< mean training loss of this step over the global batch, nats/token
  std::optional<double> val_loss = {};  ///< validation loss when computed at this step, nats/item
  std::optional<double> val_accuracy = {};  ///< classifiers: top-1 validation accuracy when computed
  std::vector<double> val_datasets = {};    ///< a blend's: each dataset's validation loss when computed
  double lr = 0;                        ///< learning rate used by this step
  double grad_norm = 0;                 ///< global L2 norm before clipping
  double items_per_s = 0;               ///< global items (tokens; images) per second over the interval
  double step_ms = 0;                   ///< wall ms per step over the interval (evaluation excluded)
  double mfu = 0;                       ///< model FLOPs utilization, fraction of peak
  std::uint64_t comm_bytes = 0;         ///< bytes this rank sent on the dp axis in this step (gradients
                                        ///< and, for 1-bit Adam, its compressed momentum exchange)
  double loss_scale = 1.0;              ///< dynamic loss scale after this step (1 without scaling)
  long long skipped = 0;                ///< updates skipped so far (non-finite or outlier steps)
  std::uint64_t items_seen = 0;         ///< training items (tokens; images) of every step so far, a resumed run's too
  double elapsed_s = 0;                 ///< wall seconds since this run's step loop began
  double remaining_s = 0;               ///< estimated wall seconds to the last step (RemainingTime)
  std::optional<double> checkpoint_in_s = {};  ///< estimated wall seconds to the next checkpoint, if one is due
  std::array<double, kSectionCount> section_ms{};  ///< wall ms per step over the interval, by timer section
  RankTimes busy = {};                  ///< busy ms per step over the ranks (output/stragglers.hpp)
  double checkpoint_s = 0, eval_s = 0;  ///< this run's checkpoint stalls and evaluation so far, s (goodput)
  double state_mib = 0;                 ///< this rank's model state (the memory accountant), MiB
  double peak_rss_mib = 0;              ///< this process's peak resident set, MiB
  std::vector<ReportColumn> fixes = {};  ///< the step fixes' figures, the same columns at every line
};

/// Each timer section's wall ms per step since the previous call: a thermo interval's breakdown.
class SectionRates {
 public:
  /// `steps`: steps since the previous call (or since the timer was reset, at the first).
  std::array<double, kSectionCount> per_step_ms(const Timer& timer, long long steps);

 private:
  std::array<double, kSectionCount> before_{};
};

/// The wall time to a later step at the mean step time of this run so far (LAMMPS' cpuremain),
/// the first step left out once there are others: it pays for warm-up (first allocations, the
/// first collectives). Evaluation and checkpoint time between steps is in the mean.
class RemainingTime {
 public:
  /// Call after each completed step with the run's elapsed wall seconds.
  void step_done(double elapsed_s);
  /// Estimated seconds from the last step_done to `steps` more steps.
  double seconds_for(long long steps) const;

 private:
  long long done_ = 0;
  double first_s_ = 0, last_s_ = 0;
};

class Thermo {
 public:
  /// metrics_path: metrics.jsonl (opened only when log is active, i.e. on rank 0). A run that
  /// starts after `start_step` steps (a resume) keeps the file's lines of steps <= start_step and
  /// drops the later ones, written after the checkpoint it resumes from (saying so), so that a
  /// reader finds one line per step; a fresh run (0) starts the file empty. Throws
  /// std::runtime_error naming the file if it cannot be read or written.
  /// item: what the rate counts ("token": column Tok/s, keys tokens_per_s and tokens_seen;
  /// "image": Img/s, images_per_s, images_seen); accuracy: a ValAcc column and val_accuracy key
  /// (classifiers).
  /// tensorboard_dir: where TensorBoard event files go (TensorBoardWriter, resumed alike), or ""
  /// for none. datasets: a blend's, whose validation losses get columns Val1, Val2, ..., keys
  /// val_loss/<dataset> and TensorBoard tags loss/val/<dataset>. startup_s: the run's start-up
  /// before its loop, for the lineage's goodput (output/goodput.hpp), which every line reports and
  /// which reads the earlier attempts' lines.
  Thermo(Log& log, const std::string& metrics_path, long long start_step, const std::string& item = "token",
         bool accuracy = false, const std::string& tensorboard_dir = "", std::vector<std::string> datasets = {},
         double startup_s = 0);
  void write(const ThermoRow& row);
  /// The lineage's goodput with this run's loop_s, checkpoint_s and eval_s so far (rank 0; zeros
  /// elsewhere).
  Goodput goodput(double loop_s, double checkpoint_s, double eval_s) const;

 private:
  void write_tensorboard(const ThermoRow& r);

  Log& log_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool header_done_ = false;
  std::string rate_header_, rate_key_, seen_key_;
  bool accuracy_;
  std::vector<std::string> datasets_;
  std::optional<GoodputLedger> ledger_;  // rank 0
};

}  // namespace gridtrain
