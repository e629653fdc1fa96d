// A CPU allocator that counts: the bytes LibTorch holds and their peak, for the activation
// memory benchmarks (install it before the first tensor is made, with c10::SetCPUAllocator at a
// priority above the default's).
#pragma once
#include <chrono>
#include <atomic>
#include <cstdint>

#include <c10/core/CPUAllocator.h>

namespace gridtrain::bench {

// The default CPU allocator, counting the bytes it has out and their peak since reset().
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(std::size_t n) override {
    auto inner = base_->allocate(n);
    void* data = inner.get();
    const auto now = now_ += static_cast<std::int64_t>(n);
    for (auto p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {}
    return {data, new Held{std::move(inner), n, this}, &release, inner.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  void reset() { peak_ = now_.load(); }
  std::int64_t now() const { return now_; }
  std::int64_t peak() const { return peak_; }

 private:
  struct Held {
    c10::DataPtr inner;
    std::size_t n;
    CountingAllocator* owner;
  };
  static void release(void* ctx) {
    auto* h = static_cast<Held*>(ctx);
    h->owner->now_ -= static_cast<std::int64_t>(h->n);
    delete h;
  }
  c10::Allocator* base_;
  std::atomic<std::int64_t> now_{0}, peak_{0};
};

/// The counting allocator, installed as LibTorch's CPU allocator on the first call (which must
/// come before the first tensor is made).
inline CountingAllocator& counting_cpu_allocator() {
  static CountingAllocator counting(c10::GetCPUAllocator());
  static const bool installed = (c10::SetCPUAllocator(&counting, /*priority=*/100), true);
  (void)installed;
  return counting;
}

/// One run of `step`: its seconds, and the peak bytes it held above what was held before it.
struct Measured {
  double seconds, peak_bytes;
};
template <class F>
Measured measure(CountingAllocator& counting, F&& step) {
  counting.reset();
  const auto before = counting.now();
  const auto t0 = std::chrono::steady_clock::now();
  step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {s, static_cast<double>(counting.peak() - before)};
}

}  // namespace gridtrain::bench
