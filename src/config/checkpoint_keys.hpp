// Internal: the deck keys of section [checkpoint] (checkpoint/checkpointer.hpp): where the files
// and the local levels go, how often, and what a run resumes from.
#pragma once
#include <vector>

#include "keys.hpp"

namespace gridtrain::detail {

/// checkpoint.dir, interval, keep_last, async, resume, init_from, local_dir, local_interval,
/// partner, ranks_per_node.
std::vector<Key> checkpoint_keys();

}  // namespace gridtrain::detail
