#include "gridtrain/parallel/shard.hpp"

#include <algorithm>

namespace gridtrain {

std::int64_t shard_rows(const ShardSpec& spec, int tp_size) {
  const std::int64_t per_part = spec.global_shape.at(static_cast<std::size_t>(spec.dim)) / spec.parts;
  return (per_part + tp_size - 1) / tp_size;
}

std::vector<std::int64_t> local_shape(const ShardSpec& spec, int size) {
  auto shape = spec.global_shape;
  if (spec.dim >= 0) shape[static_cast<std::size_t>(spec.dim)] = spec.parts * shard_rows(spec, size);
  return shape;
}

std::int64_t valid_rows(const ShardSpec& spec, int rank, int size) {
  const std::int64_t per_part = spec.global_shape.at(static_cast<std::size_t>(spec.dim)) / spec.parts;
  const std::int64_t rows = shard_rows(spec, size);
  return std::clamp<std::int64_t>(per_part - rank * rows, 0, rows);
}

}  // namespace gridtrain
