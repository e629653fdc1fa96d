// A CPU allocator that counts: the bytes LibTorch holds and their peak, for the activation
// memory benchmarks (install it before the first tensor is made, with c10::SetCPUAllocator at a
// priority above the default's).
#pragma once
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

}  // namespace gridtrain::bench
