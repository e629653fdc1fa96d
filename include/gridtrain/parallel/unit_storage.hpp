// ZeRO stage 3's coupling of the two stores of a unit (a bucket of the shared BucketLayout): the
// Reducer owns the unit's gradient bucket, ShardedParameters its flat parameter. Each tells the
// other the one event it needs, through these two interfaces and nothing else:
//   backward is about to reach the unit   → its gradient bucket must exist (GradientStorage)
//   every gradient of the unit is complete → its parameters may be freed   (ParameterStorage)
#pragma once
#include <cstddef>

namespace gridtrain {

/// Implemented by the Reducer.
class GradientStorage {
 public:
  virtual ~GradientStorage() = default;
  /// Allocates bucket b's zeroed gradient storage (and points its parameters' .grad at it) unless
  /// it exists.
  virtual void ensure_gradient(std::size_t bucket) = 0;
};

/// Implemented by ShardedParameters.
class ParameterStorage {
 public:
  virtual ~ParameterStorage() = default;
  /// Every gradient of bucket b's parameters has been accumulated in this backward.
  virtual void gradients_complete(std::size_t bucket) = 0;
};

}  // namespace gridtrain
