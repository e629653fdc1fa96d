// Token windows as the tensors a model reads: (rows, T+1) int64 on the training device, loaded
// now (token_windows) or one step ahead (WindowPrefetcher).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

namespace gridtrain {

/// (rows, T+1) int64 token windows on `device`; fill(b, out) writes row b's T+1 tokens into out.
/// For a GPU they are written into pinned host memory and copied without blocking the host (the
/// caching host allocator keeps the buffer until the copy is done).
torch::Tensor token_windows(int rows, int T, torch::Device device, const std::function<void(int, std::int64_t*)>& fill);

/// A step's training windows, loaded one step ahead: prefetch(next) is called while this step's
/// kernels run, so the host fills the next batch then; on a GPU its host→device copy runs on a
/// side stream and get() makes the compute stream wait for it with an event (no host
/// synchronisation). One step's windows are samples first .. first+rows−1 (of the numbering fill
/// takes).
class WindowPrefetcher {
 public:
  /// fill(sample, out) writes the T+1 tokens of sample `sample` into out.
  WindowPrefetcher(int rows, int T, torch::Device device, std::function<void(std::uint64_t, std::int64_t*)> fill);
  ~WindowPrefetcher();
  /// (rows, T+1) windows of samples first..: the prefetched ones when first matches, else loaded now.
  torch::Tensor get(std::uint64_t first);
  /// Starts loading samples first.. for a later get(first); nothing to do if they are loaded.
  void prefetch(std::uint64_t first);

 private:
  struct Loaded;
  std::unique_ptr<Loaded> load(std::uint64_t first) const;

  int rows_, T_;
  torch::Device device_;
  std::function<void(std::uint64_t, std::int64_t*)> fill_;
  std::unique_ptr<Loaded> current_, next_;
};

}  // namespace gridtrain
