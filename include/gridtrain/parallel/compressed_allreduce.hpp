// The two-phase compressed allreduce of the 1-bit Adam paper (Tang et al. 2021, §4.2), on flat
// fp32 tensors on the host (mpi backend) or a CUDA device (nccl backend): every rank compresses
// its p chunks (worker error feedback) → all-to-all → each rank averages the p pieces of the
// chunk it owns in fp32 and compresses the result again (server error feedback) → all-gather →
// decompress. All ranks end with the same bytes, so replicas stay identical.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/comm/compressor.hpp"

namespace gridtrain {

/// Error-feedback state of one buffer of n floats over an axis of p ranks, on the buffer's device.
struct FeedbackState {
  torch::Tensor worker;  ///< (n padded to a multiple of p,) fp32
  torch::Tensor server;  ///< (n / p rounded up,) fp32, for the chunk this rank owns
};

/// Where t's buffers live, for make_compressor.
inline Memory memory_of(const torch::Tensor& t) { return t.is_cuda() ? Memory::Cuda : Memory::Host; }

/// Replaces data, a contiguous (n,) fp32 tensor on c's device, by its mean over the axis,
/// exchanged in compressed form. state is used and updated when the compressor has error
/// feedback (allocated zero on first use, or resized when n or p changed). Returns the bytes
/// this rank sent. Collective over axis; label names the buffer in timeout errors. Throws
/// std::invalid_argument when data is not a contiguous fp32 vector.
std::size_t compressed_allreduce_mean(Axis& axis, const Compressor& c, torch::Tensor data, FeedbackState& state,
                                      const std::string& label);

}  // namespace gridtrain
