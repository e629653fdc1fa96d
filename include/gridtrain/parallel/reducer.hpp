// Data-parallel gradient reducer over grid.dp().
//
// Gradients live in flat fp32 buckets of about comm.bucket_mb MiB: every parameter's .grad is a
// view into its bucket (as PyTorch DDP's gradient_as_bucket_view), so autograd accumulates
// straight into the buffer that is communicated and no copy is made. Parameters are assigned to
// buckets in reverse registration order, the order backward produces their gradients, so that
// the overlap issue can fire a bucket as soon as its last gradient is ready.
//
// allreduce() averages the buckets over dp (sum-allreduce, then × 1/dp). Every replica receives
// the same sum, so replicas stay bitwise identical.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class Reducer {
 public:
  /// params in registration order; bucket_mb > 0 (MiB). A tensor larger than a bucket gets a
  /// bucket of its own.
  Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb);

  /// Zeroes all buckets (the .grad views stay valid).
  void zero_grad();
  /// Starts one non-blocking sum-allreduce per bucket, then waits and divides by dp.
  void allreduce();
  /// Global L2 norm of all gradients (after allreduce, the same on every replica): per-bucket
  /// fp32 norms combined in fp64.
  double grad_norm() const;
  /// Multiplies every gradient by factor (clipping).
  void scale(double factor);

  std::size_t bucket_count() const { return buckets_.size(); }

 private:
  Axis& dp_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buckets_;  // flat fp32, contiguous
};

}  // namespace gridtrain
