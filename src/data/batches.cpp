#include "gridtrain/data/batches.hpp"

#include <algorithm>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace gridtrain {
namespace {

torch::Tensor host_rows(int rows, int width, bool pinned, const std::function<void(int, std::int64_t*)>& fill) {
  auto batch = torch::empty({rows, width}, torch::TensorOptions(torch::kLong).pinned_memory(pinned));
  auto* out = batch.data_ptr<std::int64_t>();
  for (int b = 0; b < rows; ++b) fill(b, out + static_cast<std::size_t>(b) * width);
  return batch;
}

}  // namespace

torch::Tensor sample_rows(int rows, int width, torch::Device device, const std::function<void(int, std::int64_t*)>& fill) {
  return host_rows(rows, width, device.is_cuda(), fill).to(device, /*non_blocking=*/true);
}

BatchPrefetcher::BatchPrefetcher(int rows, int width, torch::Device device,
                                   std::function<void(std::uint64_t, std::int64_t*)> fill, int depth,
                                   std::uint64_t stride)
    : rows_(rows), width_(width), device_(device), fill_(std::move(fill)), depth_(static_cast<std::size_t>(std::max(0, depth))),
      stride_(stride) {
  if (depth_ > 0) thread_ = std::thread([this] { loader(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

torch::Tensor BatchPrefetcher::load(std::uint64_t first) const {
  return host_rows(rows_, width_, device_.is_cuda(),
                      [&](int b, std::int64_t* out) { fill_(first + static_cast<std::uint64_t>(b), out); });
}

void BatchPrefetcher::loader() {
  // Pinned buffers are allocated on this thread: it must use this rank's GPU, not device 0
  // (PyTorch's DataLoader pin thread does the same).
  if (device_.is_cuda()) c10::impl::VirtualGuardImpl(device_.type()).setDevice(device_);
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stop_ || !asked_.empty(); });
    if (stop_) return;
    const std::uint64_t first = asked_.front();
    asked_.pop_front();
    filling_ = first;
    lock.unlock();
    torch::Tensor rows;
    std::exception_ptr error;
    try {
      rows = load(first);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    filling_.reset();
    if (error) error_ = error;
    else ready_[first] = std::move(rows);
    changed_.notify_all();
  }
}

void BatchPrefetcher::ask(std::uint64_t first, bool next) {
  if (ready_.count(first) || filling_ == first || std::find(asked_.begin(), asked_.end(), first) != asked_.end()) return;
  if (next) asked_.push_front(first);
  else asked_.push_back(first);
  changed_.notify_all();
}

torch::Tensor BatchPrefetcher::get(std::uint64_t first) {
  if (current_.defined() && current_first_ == first) return current_;  // the same step again (OOM retry)
  torch::Tensor host;
  if (depth_ == 0) {
    host = load(first);
  } else {
    std::unique_lock lock(mutex_);
    ask(first, /*next=*/true);  // not asked for ahead (the first step): the loader reads it next
    changed_.wait(lock, [&] { return error_ || ready_.count(first); });
    if (error_) std::rethrow_exception(error_);
    host = std::move(ready_[first]);
    ready_.erase(ready_.begin(), ready_.upper_bound(first));  // this batch and any skipped before it
    for (std::size_t k = 1; k <= depth_; ++k) ask(first + k * stride_, false);
  }
  current_first_ = first;
  current_ = host.to(device_, /*non_blocking=*/true);  // pinned on a GPU: queued on the compute stream
  return current_;
}

}  // namespace gridtrain
