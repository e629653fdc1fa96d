// Per-rank reports: this process's peak resident set, and min/avg/max of a value over ranks.
#pragma once
#include <string>

#include <mpi.h>

namespace gridtrain {

/// Peak resident set size of this process (VmHWM in /proc/self/status), bytes; 0 where unknown.
double peak_rss_bytes();

/// "min/avg/max over N ranks: a / b / c UNIT" of value / unit_size (collective over comm).
std::string min_avg_max(double value, MPI_Comm comm, double unit_size = 1.0, const std::string& unit = "");

}  // namespace gridtrain
