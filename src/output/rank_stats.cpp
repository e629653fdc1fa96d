#include "gridtrain/output/rank_stats.hpp"

#include <array>
#include <cstdio>

namespace gridtrain {

std::string min_avg_max(double value, Axis& axis, double unit_size, const std::string& unit) {
  double lo = value / unit_size, sum = lo, hi = lo;
  axis.blocking_min(&lo, 1, "min/avg/max");
  axis.blocking_sum(&sum, 1, "min/avg/max");
  axis.blocking_max(&hi, 1, "min/avg/max");
  char out[128];
  std::snprintf(out, sizeof out, "min/avg/max over %d ranks: %.1f / %.1f / %.1f", axis.size(), lo,
                sum / axis.size(), hi);
  return out + (unit.empty() ? "" : " " + unit);
}

Breakdown reduce_breakdown(const Timer& timer, double loop_s, Axis& axis) {
  constexpr int n = static_cast<int>(kSectionCount) + 2;  // the sections, Other, the loop time
  std::array<double, n> t{}, lo{}, hi{}, sum{}, sq{};
  for (std::size_t i = 0; i < kSectionCount; ++i) t[i] = timer.seconds(static_cast<Section>(i));
  t[kSectionCount] = timer.other(loop_s);
  t[kSectionCount + 1] = loop_s;
  for (int i = 0; i < n; ++i) sq[static_cast<std::size_t>(i)] = t[static_cast<std::size_t>(i)] * t[static_cast<std::size_t>(i)];
  lo = hi = sum = t;
  axis.blocking_min(lo.data(), n, "timing breakdown");
  axis.blocking_max(hi.data(), n, "timing breakdown");
  axis.blocking_sum(sum.data(), n, "timing breakdown");
  axis.blocking_sum(sq.data(), n, "timing breakdown");
  Breakdown b;
  b.loop_avg_s = sum[kSectionCount + 1] / axis.size();
  for (std::size_t i = 0; i < kSectionCount; ++i)
    b.rows.push_back(section_stats(section_name(static_cast<Section>(i)), lo[i], hi[i], sum[i], sq[i], axis.size(),
                                   b.loop_avg_s));
  b.other_avg_s = sum[kSectionCount] / axis.size();
  return b;
}

}  // namespace gridtrain
