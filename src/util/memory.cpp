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

std::string min_avg_max_mib(double value_bytes, MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  double lo = value_bytes, sum = value_bytes, hi = value_bytes;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, comm);
  char out[128];
  std::snprintf(out, sizeof out, "min/avg/max over %d ranks: %.1f / %.1f / %.1f MiB", n, lo / 1048576.0,
                sum / n / 1048576.0, hi / 1048576.0);
  return out;
}

}  // namespace gridtrain
