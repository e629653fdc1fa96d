// Internal: the deck keys of section [sparsity] (dynamic sparse training, sparse/).
#pragma once
#include <vector>

#include "keys.hpp"

namespace gridtrain::detail {

/// sparsity.method, target, start, end, interval, distribution, drop_fraction, tensors.
std::vector<Key> sparsity_keys();

}  // namespace gridtrain::detail
