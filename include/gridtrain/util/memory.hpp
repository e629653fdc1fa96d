// This process's peak resident set (min/avg/max over ranks: output/rank_stats.hpp).
#pragma once

namespace gridtrain {

/// Peak resident set size of this process (VmHWM in /proc/self/status), bytes; 0 where unknown.
double peak_rss_bytes();

}  // namespace gridtrain
