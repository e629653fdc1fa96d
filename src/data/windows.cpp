#include "gridtrain/data/windows.hpp"

#include <optional>

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace gridtrain {

torch::Tensor token_windows(int rows, int T, torch::Device device, const std::function<void(int, std::int64_t*)>& fill) {
  auto batch = torch::empty({rows, T + 1}, torch::TensorOptions(torch::kLong).pinned_memory(device.is_cuda()));
  auto* out = batch.data_ptr<std::int64_t>();
  for (int b = 0; b < rows; ++b) fill(b, out + static_cast<std::size_t>(b) * (T + 1));
  return batch.to(device, /*non_blocking=*/true);
}

struct WindowPrefetcher::Loaded {
  std::uint64_t first;
  torch::Tensor windows;             // (rows, T+1) on the device
  std::optional<c10::Event> copied;  // GPU: recorded on the side stream after the copy
};

WindowPrefetcher::WindowPrefetcher(int rows, int T, torch::Device device,
                                   std::function<void(std::uint64_t, std::int64_t*)> fill)
    : rows_(rows), T_(T), device_(device), fill_(std::move(fill)) {}

WindowPrefetcher::~WindowPrefetcher() = default;

// The generic c10 stream/event interface, so that this file needs no CUDA headers; on a CPU
// device it is a plain load.
std::unique_ptr<WindowPrefetcher::Loaded> WindowPrefetcher::load(std::uint64_t first) const {
  auto fill = [&](int b, std::int64_t* out) { fill_(first + static_cast<std::uint64_t>(b), out); };
  auto l = std::make_unique<Loaded>(Loaded{first, {}, std::nullopt});
  if (!device_.is_cuda()) {
    l->windows = token_windows(rows_, T_, device_, fill);
    return l;
  }
  const c10::impl::VirtualGuardImpl gpu(device_.type());
  const c10::Stream side = gpu.getStreamFromGlobalPool(device_);
  {
    const c10::StreamGuard on_side(side);
    l->windows = token_windows(rows_, T_, device_, fill);
  }
  l->copied.emplace(device_.type());
  l->copied->record(side);
  return l;
}

torch::Tensor WindowPrefetcher::get(std::uint64_t first) {
  if (current_ && current_->first == first) return current_->windows;  // the same step again (OOM retry)
  current_ = next_ && next_->first == first ? std::move(next_) : load(first);
  next_.reset();
  if (current_->copied) {
    const c10::impl::VirtualGuardImpl gpu(device_.type());
    const c10::Stream compute = gpu.getStream(device_);
    current_->copied->block(compute);
    current_->windows.record_stream(compute);  // allocated on the side stream, read on this one
    current_->copied.reset();
  }
  return current_->windows;
}

void WindowPrefetcher::prefetch(std::uint64_t first) {
  if ((current_ && current_->first == first) || (next_ && next_->first == first)) return;
  next_ = load(first);
}

}  // namespace gridtrain
