#include "gridtrain/sparse/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <stdexcept>

namespace gridtrain {

std::vector<double> final_densities(SparsityDistribution distribution, double target,
                                    const std::vector<std::vector<std::int64_t>>& shapes) {
  if (shapes.empty()) throw std::invalid_argument("final_densities: no tensors");
  if (!(target >= 0.0 && target < 1.0)) throw std::invalid_argument("final_densities: target outside [0, 1)");
  const std::size_t n = shapes.size();
  std::vector<double> numel(n, 1.0), raw(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (const auto d : shapes[i]) numel[i] *= static_cast<double>(d), sum += static_cast<double>(d);
    raw[i] = sum / numel[i];
  }
  if (distribution == SparsityDistribution::Uniform) return std::vector<double>(n, 1.0 - target);
  std::set<std::size_t> dense;  // tensors whose ERK density would exceed 1
  for (;;) {
    double kept = 0.0, divisor = 0.0;  // weights the scaled tensors keep; Σ raw · numel over them
    for (std::size_t i = 0; i < n; ++i) {
      if (dense.contains(i)) kept -= numel[i] * target;  // kept whole: the others make up its zeros
      else kept += numel[i] * (1.0 - target), divisor += raw[i] * numel[i];
    }
    if (divisor <= 0.0) throw std::invalid_argument("final_densities: target unreachable with erk");
    const double eps = kept / divisor;
    double max_raw = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      if (!dense.contains(i)) max_raw = std::max(max_raw, raw[i]);
    if (max_raw * eps <= 1.0) {
      std::vector<double> d(n);
      for (std::size_t i = 0; i < n; ++i) d[i] = dense.contains(i) ? 1.0 : eps * raw[i];
      return d;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (raw[i] == max_raw) dense.insert(i);
  }
}

SparsitySchedule::SparsitySchedule(const Config::Sparsity& s, int train_steps)
    : method_(s.method), start_(s.start), end_(s.end_step(train_steps)), interval_(s.interval),
      alpha_(s.drop_fraction) {}

bool SparsitySchedule::updates_at(long long t) const {
  return method_ != SparsityMethod::None && t >= start_ && t <= end_ && ((t - start_) % interval_ == 0 || t == end_);
}

double SparsitySchedule::density(double d_final, long long t) const {
  if (method_ == SparsityMethod::None || t < start_) return 1.0;
  if (method_ != SparsityMethod::Gmp) return d_final;
  // The cubic at the last mask update at or before t: the density in effect.
  const long long last = t >= end_ ? end_ : start_ + (t - start_) / interval_ * interval_;
  const double progress = static_cast<double>(last - start_) / static_cast<double>(end_ - start_);
  const double reached = 1.0 - std::pow(1.0 - progress, 3.0);
  return 1.0 - (1.0 - d_final) * reached;
}

double SparsitySchedule::drop_fraction(long long t) const {
  if (method_ == SparsityMethod::Set) return alpha_;
  if (method_ != SparsityMethod::Rigl) return 0.0;
  const double x = static_cast<double>(t - start_) / static_cast<double>(end_ - start_);
  return alpha_ / 2.0 * (1.0 + std::cos(std::numbers::pi * std::clamp(x, 0.0, 1.0)));
}

}  // namespace gridtrain
