// Memory reports: this process's peak resident set, and its min/avg/max over ranks.
#pragma once
#include <string>

#include <mpi.h>

namespace gridtrain {

/// Peak resident set size of this process (VmHWM in /proc/self/status), bytes; 0 where unknown.
double peak_rss_bytes();

/// "min/avg/max over N ranks: a / b / c MiB" of value_bytes (collective over comm).
std::string min_avg_max_mib(double value_bytes, MPI_Comm comm);

}  // namespace gridtrain
