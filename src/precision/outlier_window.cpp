#include "gridtrain/precision/outlier_window.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace gridtrain {

OutlierWindow::OutlierWindow(std::size_t window, double z_max) : values_(window, 0.0), z_max_(z_max) {}

double OutlierWindow::zscore(double x) const {
  if (count_ < values_.size()) return 0.0;
  double mean = 0.0;
  for (double v : values_) mean += v;
  mean /= static_cast<double>(values_.size());
  double var = 0.0;
  for (double v : values_) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(values_.size()));
  if (sd == 0.0) return 0.0;  // a constant window gives no scale to judge by
  return (x - mean) / sd;
}

void OutlierWindow::add(double x) {
  values_[next_] = x;
  next_ = (next_ + 1) % values_.size();
  if (count_ < values_.size()) ++count_;
}

std::vector<double> OutlierWindow::state() const {
  std::vector<double> s{static_cast<double>(count_), static_cast<double>(next_)};
  s.insert(s.end(), values_.begin(), values_.end());
  return s;
}

void OutlierWindow::set_state(const std::vector<double>& s) {
  if (s.size() != values_.size() + 2)
    throw std::invalid_argument("outlier window state has " + std::to_string(s.size() - 2) + " values; this run's "
                                "train.outlier_window is " + std::to_string(values_.size()));
  if (!(s[0] >= 0 && s[0] <= static_cast<double>(values_.size()) && s[1] >= 0 &&
        s[1] < static_cast<double>(values_.size())))
    throw std::invalid_argument("outlier window state is corrupt (count " + std::to_string(s[0]) + ", next " +
                                std::to_string(s[1]) + ")");
  count_ = static_cast<std::size_t>(s[0]);
  next_ = static_cast<std::size_t>(s[1]);
  std::copy(s.begin() + 2, s.end(), values_.begin());
}

}  // namespace gridtrain
