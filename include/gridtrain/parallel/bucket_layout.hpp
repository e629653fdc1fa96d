// How a model's parameters lie in flat buckets (of their dtype): which bucket each parameter is
// in, at which offset, and each bucket's size. One layout is shared by the gradient Reducer (its gradient
// buckets) and ZeRO's ShardedParameters (its flat parameters), so a gradient shard and the
// parameter shard it updates cover the same elements. Integer arithmetic only (torch-free).
//
// Parameters are assigned to buckets in reverse registration order, the order backward produces
// their gradients. The parameters of one unit (ZeRO stage 3's unit of gathering: a transformer
// block, an embedding) get a bucket of their own; the others are grouped up to bucket_mb MiB (a
// tensor larger than that gets a bucket of its own). Under ZeRO each bucket is padded to a
// multiple of dp and dp rank r owns its r-th contiguous shard.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gridtrain {

class BucketLayout {
 public:
  /// numels: elements per parameter, registration order. unit_of: per parameter its unit or -1
  /// (missing entries: -1); a unit's parameters must be contiguous in registration order.
  /// shards: the number of equal shards a bucket is padded for (dp under ZeRO, else 1).
  /// units_required: every parameter must be in a unit (ZeRO stage 3). element_bytes: of the
  /// parameters' dtype (4 fp32, 2 bf16 | fp16), for bucket_mb. Throws
  /// std::invalid_argument for a parameter without a unit where one is required, and for a unit
  /// whose parameters are not contiguous.
  BucketLayout(const std::vector<std::int64_t>& numels, double bucket_mb, const std::vector<int>& unit_of, int shards,
               bool units_required, std::size_t element_bytes);

  std::size_t buckets() const { return members_.size(); }
  std::size_t parameters() const { return bucket_of_.size(); }
  /// Bucket b's parameters, in the order they were assigned (reverse registration order).
  const std::vector<std::size_t>& members(std::size_t b) const { return members_[b]; }
  std::size_t bucket_of(std::size_t i) const { return bucket_of_[i]; }
  /// Parameter i's first element in its bucket.
  std::int64_t offset(std::size_t i) const { return offset_[i]; }
  std::int64_t numel(std::size_t i) const { return numel_[i]; }
  /// Elements of bucket b, padding included (a multiple of shards).
  std::int64_t bucket_numel(std::size_t b) const { return bucket_numel_[b]; }
  /// Elements of each of bucket b's shards.
  std::int64_t shard_size(std::size_t b) const { return bucket_numel_[b] / shards_; }
  /// [lo, hi) of parameter i's bucket that lies in shard `rank` (lo = hi: none of it).
  std::pair<std::int64_t, std::int64_t> shard_range(std::size_t i, int rank) const;
  /// The bucket of unit u, or -1 where there is no such unit.
  std::ptrdiff_t find_unit(int unit) const;
  /// The bucket of unit u; throws std::logic_error for a unit the layout does not have.
  std::size_t bucket_of_unit(int unit) const;

 private:
  int shards_;
  std::vector<std::int64_t> numel_;               // parameter index → elements
  std::vector<std::size_t> bucket_of_;            // parameter index → bucket
  std::vector<std::int64_t> offset_;              // parameter index → first element in its bucket
  std::vector<std::vector<std::size_t>> members_;  // bucket → its parameters
  std::vector<std::int64_t> bucket_numel_;        // bucket → elements, padded to a multiple of shards_
  std::vector<std::ptrdiff_t> unit_bucket_;       // unit → bucket, -1 where there is no such unit
};

}  // namespace gridtrain
