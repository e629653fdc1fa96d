#include "gridtrain/data/blend.hpp"

#include <algorithm>

namespace gridtrain {

BlendCursor::BlendCursor(std::vector<double> weights) : weights_(std::move(weights)), counts_(weights_.size(), 0) {}

std::pair<int, std::uint64_t> BlendCursor::next() {
  const double j = std::max(static_cast<double>(j_), 1.0);
  std::size_t best = 0;
  double most = weights_[0] * j - static_cast<double>(counts_[0]);
  for (std::size_t i = 1; i < weights_.size(); ++i)
    if (const double error = weights_[i] * j - static_cast<double>(counts_[i]); error > most) most = error, best = i;
  ++j_;
  return {static_cast<int>(best), counts_[best]++};
}

void BlendCursor::seek(std::uint64_t j) {
  if (j < j_) std::fill(counts_.begin(), counts_.end(), 0), j_ = 0;
  while (j_ < j) next();
}

}  // namespace gridtrain
