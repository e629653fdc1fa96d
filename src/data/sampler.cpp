#include "gridtrain/data/sampler.hpp"

#include <algorithm>
#include <numeric>

#include "gridtrain/util/hash.hpp"

namespace gridtrain {

Sampler::Sampler(std::uint64_t tokens, int block_size, std::uint64_t seed)
    : block_(block_size), seed_(seed), windows_((tokens - 1) / static_cast<std::uint64_t>(block_size)) {}

std::uint64_t Sampler::window_start(std::uint64_t g) {
  const std::uint64_t e = epoch(g);
  if (e != perm_epoch_) {
    perm_.resize(windows_);
    std::iota(perm_.begin(), perm_.end(), 0u);
    std::uint64_t state = splitmix64(seed_ ^ splitmix64(e));
    for (std::uint64_t i = windows_ - 1; i > 0; --i) {
      state = splitmix64(state);
      // Modulo bias is below 2^-32 for any realistic window count; determinism is what matters.
      std::swap(perm_[i], perm_[state % (i + 1)]);
    }
    perm_epoch_ = e;
  }
  return static_cast<std::uint64_t>(perm_[g % windows_]) * block_;
}

std::vector<std::uint64_t> validation_starts(std::size_t val_tokens, int block_size, int count) {
  const std::uint64_t last = val_tokens - (block_size + 1);  // loader guarantees val_tokens >= T + 1
  const std::uint64_t windows = (val_tokens - 1) / block_size;  // disjoint windows at stride T
  std::vector<std::uint64_t> starts(std::min<std::uint64_t>(static_cast<std::uint64_t>(count), windows));
  if (starts.size() == windows) {  // as many as there are: each window once, none overlapping
    for (std::uint64_t i = 0; i < windows; ++i) starts[i] = i * block_size;
    return starts;
  }
  for (std::size_t i = 0; i < starts.size(); ++i) starts[i] = starts.size() == 1 ? 0 : last * i / (starts.size() - 1);
  return starts;
}

std::pair<std::size_t, std::size_t> share(std::size_t n, int r, int p) {
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = r * base + std::min<std::size_t>(r, extra);
  return {begin, begin + base + (static_cast<std::size_t>(r) < extra ? 1 : 0)};
}

}  // namespace gridtrain
