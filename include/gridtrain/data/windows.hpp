// Token windows as the tensors a model reads: (rows, T+1) int64 on the training device, loaded
// now (token_windows) or ahead on a loader thread (WindowPrefetcher).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <torch/torch.h>

namespace gridtrain {

/// (rows, T+1) int64 token windows on `device`; fill(b, out) writes row b's T+1 tokens into out.
/// For a GPU they are written into pinned host memory and copied without blocking the host (the
/// caching host allocator keeps the buffer until the copy is done).
torch::Tensor token_windows(int rows, int T, torch::Device device, const std::function<void(int, std::int64_t*)>& fill);

/// A step's training windows, loaded ahead on a background thread: prefetch(first) asks for a
/// later step's samples while this step computes, and get(first) takes them (host windows,
/// pinned on a GPU and copied to the device without blocking the host). fill runs on the loader
/// thread only, so it needs no locking of its own. One step's windows are samples
/// first .. first+rows−1 (of the numbering fill takes).
class WindowPrefetcher {
 public:
  /// fill(sample, out) writes the T+1 tokens of sample `sample` into out. depth: batches kept
  /// ready ahead (data.prefetch); 0 loads each batch on the calling thread when get() asks.
  WindowPrefetcher(int rows, int T, torch::Device device, std::function<void(std::uint64_t, std::int64_t*)> fill,
                   int depth);
  ~WindowPrefetcher();
  /// (rows, T+1) windows of samples first..: the prefetched ones when they were asked for, else
  /// loaded now. Rethrows what fill threw on the loader thread.
  torch::Tensor get(std::uint64_t first);
  /// Asks for samples first.. to be loaded ahead, if fewer than depth batches are waiting.
  void prefetch(std::uint64_t first);

 private:
  torch::Tensor load(std::uint64_t first) const;  // (rows, T+1) host windows
  void loader();

  int rows_, T_;
  torch::Device device_;
  std::function<void(std::uint64_t, std::int64_t*)> fill_;
  std::size_t depth_;
  std::uint64_t current_first_ = 0;
  torch::Tensor current_;  // this step's windows on the device (an out-of-memory retry reuses them)
  // The loader thread's work: asked for, being filled, filled (by first sample).
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::uint64_t> asked_;
  std::optional<std::uint64_t> filling_;
  std::map<std::uint64_t, torch::Tensor> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gridtrain
