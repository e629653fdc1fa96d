// Internal: the deck keys of section [sparsity] (dynamic sparse training, sparse/).
#pragma once
#include <string>
#include <vector>

#include "keys.hpp"

namespace gridtrain::detail {

/// sparsity.method, target, start, end, interval, distribution, drop_fraction, tensors.
std::vector<Key> sparsity_keys();
/// What keeps the [sparsity] keys from running with the rest of c (the schedule's steps, the
/// optimizer, a tied embedding split over pipeline stages), appended to errors.
void check_sparsity(const Config& c, std::vector<std::string>& errors);

}  // namespace gridtrain::detail
