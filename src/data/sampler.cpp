#include "gridtrain/data/sampler.hpp"

#include <algorithm>
#include <bit>
#include <utility>

#include "gridtrain/util/hash.hpp"

namespace gridtrain {

Sampler::Sampler(std::uint64_t tokens, int block_size, std::uint64_t seed)
    : block_(block_size), seed_(seed), windows_((tokens - 1) / static_cast<std::uint64_t>(block_size)),
      // 2h >= the bits of W - 1 (one bit at least): the network's domain 4^h holds [0, W)
      half_bits_(std::max(1, (static_cast<int>(std::bit_width(windows_ - 1)) + 1) / 2)) {}

std::uint64_t Sampler::permute(std::uint64_t i, std::uint64_t e) const {
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  const std::uint64_t key = splitmix64(seed_ ^ splitmix64(e));
  do {  // a permutation of [0, 4^h): its cycle through i < W comes back below W
    std::uint64_t left = i >> half_bits_, right = i & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = splitmix64(key ^ splitmix64(right ^ (round << 60))) & mask;
      left = std::exchange(right, left ^ f);
    }
    i = (left << half_bits_) | right;
  } while (i >= windows_);
  return i;
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
