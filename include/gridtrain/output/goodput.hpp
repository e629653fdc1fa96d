// Goodput over a lineage (MaxText's goodput recorder, Megatron's goodput accounting): of the wall
// time since the lineage's first attempt started, the share that trained steps the lineage kept,
// against time lost to steps recomputed after a failure, to restarts (from an attempt's last thermo
// line to the next attempt's start: the failure's tail, its detection, the relaunch or the queue;
// plus every attempt's start-up, the load included), to checkpoint stalls and to evaluation.
//
// Every metrics.jsonl line carries the figures so far, in an object "goodput":
//   attempt, unix_s                     which attempt of the lineage wrote it, and when
//   checkpoint_s, eval_s                this attempt's so far (its loop is the line's elapsed_s)
//   wall_s, productive_s, lost_s, restart_s, lineage_checkpoint_s, lineage_eval_s, fraction
//                                       the lineage's so far; fraction = productive_s / wall_s
// and a resumed attempt reads the lines of the one before it, all of them (before the resume drops
// those past its step): the steps after the line at or before the step it resumes from count as
// lost, at thermo-line granularity.
#pragma once
#include <string>
#include <vector>

namespace gridtrain {

/// Seconds over the lineage, by where they went.
struct Goodput {
  int attempts = 1;
  double wall_s = 0, productive_s = 0, lost_s = 0, restart_s = 0, checkpoint_s = 0, eval_s = 0;
  double other_s() const { return wall_s - productive_s - lost_s - restart_s - checkpoint_s - eval_s; }
  double fraction() const { return wall_s > 0 ? productive_s / wall_s : 0; }
};

class GoodputLedger {
 public:
  /// An attempt starting at start_step (0: a fresh lineage) after startup_s seconds of start-up
  /// (process start to the loop: data, model, load), at unix time now_s, after the metrics.jsonl
  /// lines of the earlier attempts (lines without a goodput object are passed over).
  GoodputLedger(const std::vector<std::string>& lines, long long start_step, double startup_s, double now_s);
  /// The lineage's seconds with this attempt's so far: loop_s of step loop, its checkpoint_s and
  /// eval_s included, at unix time now_s.
  Goodput totals(double loop_s, double checkpoint_s, double eval_s, double now_s) const;
  /// The "goodput" object of a metrics.jsonl line (JSON text), for totals(...) of these figures.
  std::string line_field(double loop_s, double checkpoint_s, double eval_s, double now_s) const;

 private:
  int attempt_ = 1;
  double lineage_start_s_ = 0;
  Goodput before_;  // the attempts before this one; restart_s includes this one's start-up
};

/// The summary's table of g, LAMMPS-style (seconds and % of the wall time per row).
std::string goodput_table(const Goodput& g);
/// g as a JSON object (summary.json's "goodput").
std::string goodput_json(const Goodput& g);

/// Seconds since the Unix epoch (the system clock): the ledger's times.
double unix_seconds();

}  // namespace gridtrain
