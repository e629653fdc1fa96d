// Section timer for the step loop, LAMMPS style: stamp(S) charges the wall time since the previous
// stamp to section S. breakdown() reduces each section over the ranks (min/avg/max/%varavg) for
// the "MPI task timing breakdown" table printed at the end of a run.
#pragma once
#include <array>
#include <chrono>
#include <string>
#include <vector>

#include <mpi.h>

namespace gridtrain {

enum class Section { Data, Compute, Bubble, Comm, Optim, Eval, Checkpoint, Output, Other, kCount };
inline constexpr size_t kSectionCount = static_cast<size_t>(Section::kCount);

/// Name of a section as printed in the breakdown table.
const char* section_name(Section s);

struct SectionStats {
  std::string name;
  double min_s, avg_s, max_s;  ///< seconds over ranks
  double varavg_pct;           ///< 100 · stddev / avg over ranks (LAMMPS %varavg)
  double total_pct;            ///< 100 · avg / loop time
};

class Timer {
 public:
  /// Starts counting now; the time until the first stamp goes to the section of that stamp.
  void reset();
  /// Charges the time since the previous stamp (or reset) to s.
  void stamp(Section s);
  /// Collective over comm: per-section statistics over ranks. loop_s is the loop wall time used
  /// for %total.
  std::vector<SectionStats> breakdown(MPI_Comm comm, double loop_s) const;

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
  std::array<double, kSectionCount> acc_{};
};

/// Formats the breakdown as LAMMPS' "MPI task timing breakdown" table (with trailing newline).
std::string format_breakdown(const std::vector<SectionStats>& stats);

}  // namespace gridtrain
