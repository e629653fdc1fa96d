// Deterministic, layout-independent sampling of training windows.
//
// The training split is cut into W = (N - 1) / T windows of T + 1 tokens at stride T (each
// target token is covered once per epoch). Global sample index g (= step · global_batch + j)
// belongs to epoch e = g / W and reads window perm_e[g mod W], where perm_e is a Fisher–Yates
// shuffle driven by splitmix64(seed, e) (util/hash.hpp). So the global batch of step s is a function of
// (seed, s) alone, and dp rank r reads its contiguous slice of it: every dp layout sees the same
// samples at the same step, whatever the timing. The state to checkpoint is (seed, g).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace gridtrain {

class Sampler {
 public:
  /// tokens: the training split's length N; block_size T. Needs N >= T + 1 (checked when the
  /// data are loaded). Holds one epoch's permutation: 4 bytes per window.
  Sampler(std::uint64_t tokens, int block_size, std::uint64_t seed);
  /// A sampler over n items (images): each read once per epoch, window_start(g) the item's index.
  static Sampler items(std::uint64_t n, std::uint64_t seed) { return Sampler(n + 1, 1, seed); }

  std::uint64_t windows() const { return windows_; }
  /// Epoch of global sample index g.
  std::uint64_t epoch(std::uint64_t g) const { return g / windows_; }
  /// First token of the window read by global sample index g.
  std::uint64_t window_start(std::uint64_t g);

 private:
  int block_;
  std::uint64_t seed_;
  std::uint64_t windows_;
  std::uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<std::uint32_t> perm_;
};

/// Validation subset: count windows of T + 1 tokens evenly spaced over the validation split;
/// returns their start offsets (same on every rank and layout). When count is at least the
/// (val_tokens − 1) / T disjoint windows there are, returns those, each once (fewer than count).
std::vector<std::uint64_t> validation_starts(std::size_t val_tokens, int block_size, int count);

/// validation_starts over n items (images): count item indices evenly spaced, or all n once.
inline std::vector<std::uint64_t> validation_items(std::uint64_t n, int count) { return validation_starts(n + 1, 1, count); }

/// Contiguous share of n items for rank r of p ranks: [begin, end). The first n mod p ranks get
/// one item more.
std::pair<std::size_t, std::size_t> share(std::size_t n, int r, int p);

}  // namespace gridtrain
