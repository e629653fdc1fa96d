#include "gridtrain/util/timer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gridtrain {

const char* section_name(Section s) {
  static constexpr std::array<const char*, kSectionCount> names = {
      "Data", "Compute", "Bubble", "Comm", "Optim", "Eval", "Checkpt", "Output", "Other"};
  return names[static_cast<size_t>(s)];
}

void Timer::reset() {
  acc_.fill(0.0);
  last_ = Clock::now();
}

void Timer::stamp(Section s) {
  const auto now = Clock::now();
  acc_[static_cast<size_t>(s)] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

std::vector<SectionStats> Timer::breakdown(MPI_Comm comm, double loop_s) const {
  int nprocs = 1;
  MPI_Comm_size(comm, &nprocs);
  std::array<double, kSectionCount> mn{}, mx{}, sum{}, sq{};
  std::array<double, kSectionCount> squares{};
  for (size_t i = 0; i < kSectionCount; ++i) squares[i] = acc_[i] * acc_[i];
  MPI_Allreduce(acc_.data(), mn.data(), kSectionCount, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(acc_.data(), mx.data(), kSectionCount, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(acc_.data(), sum.data(), kSectionCount, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(squares.data(), sq.data(), kSectionCount, MPI_DOUBLE, MPI_SUM, comm);
  std::vector<SectionStats> out;
  for (size_t i = 0; i < kSectionCount; ++i) {
    const double avg = sum[i] / nprocs;
    const double var = std::max(0.0, sq[i] / nprocs - avg * avg);
    out.push_back({section_name(static_cast<Section>(i)), mn[i], avg, mx[i],
                   avg > 0 ? 100.0 * std::sqrt(var) / avg : 0.0,
                   loop_s > 0 ? 100.0 * avg / loop_s : 0.0});
  }
  return out;
}

std::string format_breakdown(const std::vector<SectionStats>& stats) {
  std::string out = "\nMPI task timing breakdown:\n"
                    "Section |  min time  |  avg time  |  max time  |%varavg| %total\n"
                    "---------------------------------------------------------------\n";
  char line[160];
  for (const auto& s : stats) {
    std::snprintf(line, sizeof line, "%-8s| %-10.4g | %-10.4g | %-10.4g |%6.1f |%6.2f\n",
                  s.name.c_str(), s.min_s, s.avg_s, s.max_s, s.varavg_pct, s.total_pct);
    out += line;
  }
  return out;
}

}  // namespace gridtrain
