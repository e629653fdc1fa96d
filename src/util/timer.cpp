#include "gridtrain/util/timer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace gridtrain {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* section_name(Section s) {
  static constexpr std::array<const char*, kSectionCount> names = {
      "Data", "Compute", "TP comm", "PP comm", "EP comm", "CP comm", "DP comm", "Optim", "Eval", "Checkpt", "Output"};
  return names[static_cast<std::size_t>(s)];
}

void Timer::reset() {
  acc_.fill(0.0);
  last_.restart();
  loop_.restart();
}

void Timer::stamp(Section s) {
  if (sync_) sync_();
  acc_[static_cast<std::size_t>(s)] += last_.seconds();
  last_.restart();
}

void Timer::stamp() {
  if (sync_) sync_();
  last_.restart();
}

void Timer::move(Section from, Section to, double seconds) {
  const double s = std::clamp(seconds, 0.0, acc_[static_cast<std::size_t>(from)]);
  acc_[static_cast<std::size_t>(from)] -= s;
  acc_[static_cast<std::size_t>(to)] += s;
}

double Timer::other(double loop_s) const {
  double sum = 0;
  for (double t : acc_) sum += t;
  return loop_s - sum;
}

SectionStats section_stats(std::string name, double min_s, double max_s, double sum_s, double sum_sq, int nprocs,
                           double loop_s) {
  const double avg = sum_s / nprocs, avg_sq = sum_sq / nprocs;
  // LAMMPS' measure of load imbalance: sqrt(⟨t²⟩/⟨t⟩ − ⟨t⟩) = sqrt(variance / mean), in
  // percent, skipped below a millisecond (finish.cpp, mpi_timings).
  const double spread = avg > 0.001 ? avg_sq / avg - avg : 0.0;
  return {std::move(name), min_s, avg, max_s, spread > 1e-10 ? 100.0 * std::sqrt(spread) : 0.0,
          loop_s > 0 ? 100.0 * avg / loop_s : 0.0};
}

std::string format_breakdown(const std::vector<SectionStats>& stats, double other_avg_s, double loop_s) {
  std::string out = "\nMPI task timing breakdown:\n"
                    "Section |  min time  |  avg time  |  max time  |%varavg| %total\n"
                    "---------------------------------------------------------------\n";
  char line[160];
  for (const auto& s : stats) {
    std::snprintf(line, sizeof line, "%-8s| %-10.4g | %-10.4g | %-10.4g |%6.1f |%6.2f\n", s.name.c_str(), s.min_s,
                  s.avg_s, s.max_s, s.varavg_pct, s.total_pct);
    out += line;
  }
  std::snprintf(line, sizeof line, "Other   |            | %-10.4g |            |       |%6.2f\n", other_avg_s,
                loop_s > 0 ? 100.0 * other_avg_s / loop_s : 0.0);
  return out + line;
}

}  // namespace gridtrain
