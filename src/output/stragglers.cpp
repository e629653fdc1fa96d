#include "gridtrain/output/stragglers.hpp"

#include <unistd.h>

#include <algorithm>
#include <numeric>

namespace gridtrain {

StragglerWatch::StragglerWatch(Axis& world, double factor, Log& log) : world_(world), factor_(factor), log_(log) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  hosts_ = world.blocking_gather_text(host, "host names");
}

RankTimes StragglerWatch::observe(long long step, double busy_ms) {
  const auto n = static_cast<std::size_t>(world_.size());
  std::vector<double> all(n, 0.0);  // each rank's slot, summed: everyone's value on every rank
  all[static_cast<std::size_t>(world_.rank())] = busy_ms;
  world_.blocking_sum(all.data(), static_cast<int>(n), "busy time per rank");
  RankTimes t;
  const auto slowest = std::max_element(all.begin(), all.end());
  t.slowest = static_cast<int>(slowest - all.begin());
  t.max_ms = *slowest;
  t.min_ms = *std::min_element(all.begin(), all.end());
  t.mean_ms = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(n);
  // The others' median: with two ranks, the other one.
  std::vector<double> others = all;
  others.erase(others.begin() + t.slowest);
  const auto mid = others.size() / 2;
  std::nth_element(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(mid), others.end());
  t.median_ms = others.empty() ? t.max_ms : others[mid];
  const int slow = n > 1 && t.max_ms > factor_ * t.median_ms ? t.slowest : -1;
  if (slow != suspect_) {
    suspect_ = slow;
    suspect_since_ = step;
    streak_ = 0;
  }
  if (slow >= 0 && ++streak_ == 2)
    log_.print("Straggler: rank " + std::to_string(slow) + " on " + hosts_[static_cast<std::size_t>(slow)] + " is busy " +
               fmt("%.1f", t.max_ms) + " ms per step, " + fmt("%.2f", t.max_ms / std::max(t.median_ms, 1e-9)) +
               "x the other ranks' median " + fmt("%.1f", t.median_ms) + " ms, at the thermo lines of steps " +
               std::to_string(suspect_since_) + " to " + std::to_string(step) + " (output.straggler_factor = " +
               fmt("%g", factor_) + "); every rank waits for it in the collectives\n");
  return t;
}

}  // namespace gridtrain
