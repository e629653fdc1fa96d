// Statistics over ranks for the reports: min/avg/max of one value, and the timer's sections
// reduced into the rows of LAMMPS' "MPI task timing breakdown". Collective over the axis given.
#pragma once
#include <string>
#include <vector>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

/// "min/avg/max over N ranks: a / b / c UNIT" of value / unit_size.
std::string min_avg_max(double value, Axis& axis, double unit_size = 1.0, const std::string& unit = "");

/// The timing breakdown over the axis: one row per section, and the average residual (Other)
/// of loop_s, this rank's loop time.
struct Breakdown {
  std::vector<SectionStats> rows;
  double other_avg_s = 0;
  double loop_avg_s = 0;
};
Breakdown reduce_breakdown(const Timer& timer, double loop_s, Axis& axis);

}  // namespace gridtrain
