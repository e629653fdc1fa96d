#include "gridtrain/data/windows.hpp"

namespace gridtrain {

torch::Tensor token_windows(int rows, int T, torch::Device device, const std::function<void(int, std::int64_t*)>& fill) {
  auto batch = torch::empty({rows, T + 1}, torch::TensorOptions(torch::kLong).pinned_memory(device.is_cuda()));
  auto* out = batch.data_ptr<std::int64_t>();
  for (int b = 0; b < rows; ++b) fill(b, out + static_cast<std::size_t>(b) * (T + 1));
  return batch.to(device, /*non_blocking=*/true);
}

}  // namespace gridtrain
