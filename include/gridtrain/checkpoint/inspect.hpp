// `gridtrain inspect CKPT`: step, grid, deck and a table of datasets (shape, dtype, the fraction of
// zeros of a float32 one: sparse weights and their /sparse masks, checksum).
#pragma once
#include <string>

#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// Prints the checkpoint's metadata and verifies every dataset's checksum; run on one rank.
/// Returns 0 when every checksum matches, kExitError otherwise. Throws gridtrain::Error when the
/// file cannot be opened or is not a gridtrain checkpoint.
int inspect_checkpoint(const std::string& path, Log& log);

}  // namespace gridtrain
