// Token windows as the tensors a model reads: (rows, T+1) int64 on the training device.
#pragma once
#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace gridtrain {

/// (rows, T+1) int64 token windows on `device`; fill(b, out) writes row b's T+1 tokens into out.
/// For a GPU they are written into pinned host memory and copied without blocking the host (the
/// caching host allocator keeps the buffer until the copy is done).
torch::Tensor token_windows(int rows, int T, torch::Device device, const std::function<void(int, std::int64_t*)>& fill);

}  // namespace gridtrain
