#include "gridtrain/util/memory.hpp"

#include <cstdio>
#include <fstream>

namespace gridtrain {

double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // "VmHWM:  123 kB"
  return 0.0;
}

std::string min_avg_max(double value, MPI_Comm comm, double unit_size, const std::string& unit) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  double lo = value / unit_size, sum = lo, hi = lo;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, comm);
  char out[128];
  std::snprintf(out, sizeof out, "min/avg/max over %d ranks: %.1f / %.1f / %.1f", n, lo, sum / n, hi);
  return out + (unit.empty() ? "" : " " + unit);
}

}  // namespace gridtrain
