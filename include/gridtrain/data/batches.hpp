// Sample rows as the tensors a model reads: (rows, width) int64 on the training device (token
// windows of T + 1 tokens; images' pixels and label), loaded now (sample_rows) or ahead on a
// loader thread (BatchPrefetcher).
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

/// (rows, width) int64 sample rows on `device`; fill(b, out) writes row b's width values into out.
/// For a GPU they are written into pinned host memory and copied without blocking the host (the
/// caching host allocator keeps the buffer until the copy is done).
torch::Tensor sample_rows(int rows, int width, torch::Device device, const std::function<void(int, std::int64_t*)>& fill);

/// A step's training batch of sample rows, loaded ahead on a background thread: get(first) takes
/// this step's batch (host rows, pinned on a GPU and copied to the device without blocking the host) and
/// asks the loader thread for the next `depth` steps' batches, which it reads while this step
/// computes. fill runs on the loader thread only, so it needs no locking of its own. One step's
/// rows are samples first .. first+rows−1 (of the numbering fill takes); the next step's start
/// at first + stride.
class BatchPrefetcher {
 public:
  /// fill(sample, out) writes the width values of sample `sample` into out. depth: batches kept
  /// ready ahead (data.prefetch); 0 loads each batch on the calling thread when get() asks.
  /// stride: samples from one step's first to the next's (the global batch).
  BatchPrefetcher(int rows, int width, torch::Device device, std::function<void(std::uint64_t, std::int64_t*)> fill,
                   int depth, std::uint64_t stride);
  ~BatchPrefetcher();
  /// (rows, width) rows of samples first..: the prefetched ones when they were asked for, else
  /// loaded now; then asks for the next depth steps'. The same first again (an out-of-memory
  /// retry) returns the same tensor. Rethrows what fill threw on the loader thread.
  torch::Tensor get(std::uint64_t first);

 private:
  torch::Tensor load(std::uint64_t first) const;  // (rows, width) host rows
  void ask(std::uint64_t first, bool next);       // to the loader's queue (front: next), unless known; under mutex_
  void loader();

  int rows_, width_;
  torch::Device device_;
  std::function<void(std::uint64_t, std::int64_t*)> fill_;
  std::size_t depth_;
  std::uint64_t stride_;
  std::uint64_t current_first_ = 0;
  torch::Tensor current_;  // this step's rows on the device (an out-of-memory retry reuses them)
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
