// The one clock of gridtrain, LAMMPS style (src/timer.cpp, src/finish.cpp).
//
// Stopwatch: seconds since it was started (steady wall clock) — every duration gridtrain reports
// comes from it. Timer: the step loop's sections. stamp(S) charges the time since the previous
// stamp to S; stamp() restarts the clock without charging (work no section owns). "Other" is
// not stamped: it is the residual, loop time − Σ sections, as in LAMMPS. section_stats() turns
// the per-rank times, reduced over ranks, into one row of the "MPI task timing breakdown".
#pragma once
#include <array>
#include <string>
#include <vector>

namespace gridtrain {

/// Seconds on a clock; the default is the steady wall clock.
using ClockFn = double (*)();
double wall_seconds();

class Stopwatch {
 public:
  explicit Stopwatch(ClockFn clock = wall_seconds) : clock_(clock), start_(clock()) {}
  void restart() { start_ = clock_(); }
  /// Seconds since construction or restart().
  double seconds() const { return clock_() - start_; }

 private:
  ClockFn clock_;
  double start_;
};

/// Step-loop sections. Communication on each grid axis has its own row (grid/grid.hpp's kAxes
/// names each axis's): TpComm is the time waited on tensor-parallel collectives inside
/// forward/backward (moved out of Compute), PpComm the pipeline sends/receives (the bubble
/// included), EpComm the MoE token dispatch's all-to-alls and CpComm the ring attention's key/value
/// transfers (both inside forward/backward, moved out of Compute as TpComm), DpComm the gradient
/// exchange and the step's grid-wide verdict reduction.
enum class Section { Data, Compute, TpComm, PpComm, EpComm, CpComm, DpComm, Optim, Eval, Checkpoint, Output, kCount };
inline constexpr std::size_t kSectionCount = static_cast<std::size_t>(Section::kCount);

/// Name of a section as printed in the breakdown table (at most 8 characters).
const char* section_name(Section s);

class Timer {
 public:
  explicit Timer(ClockFn clock = wall_seconds) : last_(clock), loop_(clock) {}
  /// Called before each reading of the clock (e.g. a device synchronization, output.timer = sync);
  /// null: none.
  void set_sync(void (*sync)()) { sync_ = sync; }
  /// Zeroes the sections and starts the loop clock.
  void reset();
  /// Charges the time since the previous stamp (or reset) to s.
  void stamp(Section s);
  /// Restarts the section clock without charging any section (the time ends up in Other).
  void stamp();
  /// Moves seconds already charged to `from` over to `to` (e.g. tensor-parallel waits measured
  /// by the axis inside Compute); clamped to what `from` holds.
  void move(Section from, Section to, double seconds);
  double seconds(Section s) const { return acc_[static_cast<std::size_t>(s)]; }
  /// Seconds since reset().
  double loop_seconds() const { return loop_.seconds(); }
  /// This rank's residual: loop_s − Σ sections (LAMMPS "Other").
  double other(double loop_s) const;

 private:
  Stopwatch last_, loop_;
  std::array<double, kSectionCount> acc_{};
  void (*sync_)() = nullptr;
};

struct SectionStats {
  std::string name;
  double min_s, avg_s, max_s;  ///< seconds over ranks
  double varavg_pct;           ///< LAMMPS %varavg: 100·sqrt(⟨t²⟩/⟨t⟩ − ⟨t⟩), 0 for ⟨t⟩ <= 1 ms
  double total_pct;            ///< 100 · avg / loop time
};

/// One breakdown row from a section's time reduced over nprocs ranks: min, max, Σt and Σt²
/// (LAMMPS Finish::mpi_timings). loop_s is the loop wall time for %total.
SectionStats section_stats(std::string name, double min_s, double max_s, double sum_s, double sum_sq, int nprocs,
                           double loop_s);

/// The rows as LAMMPS' "MPI task timing breakdown" table; other_avg_s is printed as the Other
/// row (average only, as LAMMPS does). With trailing newline.
std::string format_breakdown(const std::vector<SectionStats>& stats, double other_avg_s, double loop_s);

}  // namespace gridtrain
