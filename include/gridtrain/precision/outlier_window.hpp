// Loss-spike guard (train.skip_outliers), after llm.c's outlier detector: a value more than
// z_max standard deviations above the mean of the last `window` accepted values is an outlier
// (a spike; a drop is progress), and the step that produced it is skipped. A rejected value is not added, so the window is exactly what it was;
// the statistics are recomputed from the stored values (no running sums to drift).
#pragma once
#include <cstddef>
#include <vector>

namespace gridtrain {

class OutlierWindow {
 public:
  /// window >= 2 values; z_max > 0.
  OutlierWindow(std::size_t window, double z_max);
  /// (x − mean) / std over the window; 0 until the window is full (no verdict yet).
  double zscore(double x) const;
  bool is_outlier(double x) const { return zscore(x) > z_max_; }
  /// Adds an accepted value (the oldest drops out once the window is full).
  void add(double x);

  /// {count, next slot, values...}: checkpointed, so that a resume judges the same way.
  std::vector<double> state() const;
  /// Restores state(); throws std::invalid_argument when its size is not this window's or its
  /// count or slot is out of range.
  void set_state(const std::vector<double>& s);

 private:
  std::vector<double> values_;
  std::size_t count_ = 0, next_ = 0;
  double z_max_;
};

}  // namespace gridtrain
