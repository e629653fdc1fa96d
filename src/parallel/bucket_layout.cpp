#include "gridtrain/parallel/bucket_layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gridtrain {

BucketLayout::BucketLayout(const std::vector<std::int64_t>& numels, double bucket_mb, const std::vector<int>& unit_of,
                           int shards, bool units_required, std::size_t element_bytes)
    : shards_(shards), numel_(numels), bucket_of_(numels.size()), offset_(numels.size()) {
  auto unit = [&](std::size_t i) { return i < unit_of.size() ? unit_of[i] : -1; };
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0 / static_cast<double>(element_bytes));
  // Group in reverse registration order: backward produces the last layers' gradients first.
  std::int64_t filled = 0;
  for (std::size_t i = numels.size(); i-- > 0;) {
    if (units_required && unit(i) < 0)
      throw std::invalid_argument("bucket layout: ZeRO stage 3 needs every parameter in a unit (parameter " +
                                  std::to_string(i) + " has none)");
    if (members_.empty() || unit(i) != unit(members_.back().back()) ||
        (unit(i) < 0 && filled > 0 && filled + numels[i] > cap))
      members_.emplace_back(), filled = 0;
    members_.back().push_back(i);
    filled += numels[i];
  }
  for (std::size_t b = 0; b < members_.size(); ++b) {
    std::int64_t n = 0;
    for (auto i : members_[b]) {
      bucket_of_[i] = b;
      offset_[i] = n;
      n += numels[i];
    }
    bucket_numel_.push_back((n + shards - 1) / shards * shards);  // padded to equal shards
    const int u = unit(members_[b].front());
    if (u < 0) continue;
    if (static_cast<std::size_t>(u) >= unit_bucket_.size()) unit_bucket_.resize(static_cast<std::size_t>(u) + 1, -1);
    if (unit_bucket_[static_cast<std::size_t>(u)] >= 0)
      throw std::invalid_argument("bucket layout: the parameters of unit " + std::to_string(u) +
                                  " are not contiguous in registration order");
    unit_bucket_[static_cast<std::size_t>(u)] = static_cast<std::ptrdiff_t>(b);
  }
}

std::pair<std::int64_t, std::int64_t> BucketLayout::shard_range(std::size_t i, int rank) const {
  const std::int64_t s = shard_size(bucket_of_[i]), lo = rank * s, hi = lo + s;
  return {std::clamp(offset_[i], lo, hi), std::clamp(offset_[i] + numel_[i], lo, hi)};
}

std::ptrdiff_t BucketLayout::find_unit(int unit) const {
  const auto u = static_cast<std::size_t>(unit);
  return unit < 0 || u >= unit_bucket_.size() ? -1 : unit_bucket_[u];
}

std::size_t BucketLayout::bucket_of_unit(int unit) const {
  const std::ptrdiff_t b = find_unit(unit);
  if (b < 0) throw std::logic_error("bucket layout: the model used unit " + std::to_string(unit) + ", which it did not declare");
  return static_cast<std::size_t>(b);
}

}  // namespace gridtrain
