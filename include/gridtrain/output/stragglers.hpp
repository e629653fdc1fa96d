// Per-rank step time and stragglers: at every thermo line each rank's busy time per step (its
// data, compute and optimizer sections: the step time less its waits in collectives, which a slow
// peer lengthens for everyone) is gathered over the world; its min, mean and max go into
// metrics.jsonl, and a rank whose busy time exceeds the other ranks' median by output.straggler_factor
// at two thermo lines in a row is named in the log (once per streak), with its host.
#pragma once
#include <string>
#include <vector>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// Busy time per step over the ranks, ms.
struct RankTimes {
  double min_ms = 0, mean_ms = 0, max_ms = 0;
  double median_ms = 0;  ///< of the ranks other than the slowest
  int slowest = 0;  ///< the world rank of max_ms
};

class StragglerWatch {
 public:
  /// Collective over world (gathers the host names).
  StragglerWatch(Axis& world, double factor, Log& log);
  /// This rank's busy ms per step over the interval ending at `step`. Collective over world.
  RankTimes observe(long long step, double busy_ms);

 private:
  Axis& world_;
  double factor_;
  Log& log_;
  std::vector<std::string> hosts_;  // by world rank
  int suspect_ = -1;                // the rank slower than the factor at the last line, or -1
  long long suspect_since_ = 0;     // the step of the line that first found it
  int streak_ = 0;                  // lines in a row it was
};

}  // namespace gridtrain
