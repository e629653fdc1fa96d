// Deterministic, layout-independent sampling of training windows.
//
// The training split is cut into W = (N - 1) / T windows of T + 1 tokens at stride T (each
// target token is covered once per epoch). Global sample index g (= step · global_batch + j)
// belongs to epoch e = g / W and reads window perm_e(g mod W). perm_e is computed, not stored, so
// memory does not grow with the corpus: a 4-round balanced Feistel network on [0, 4^h) ⊇ [0, W),
// round function splitmix64 (util/hash.hpp) keyed by (seed, e, round), cycle-walked until it lands
// below W (Black & Rogaway 2002, "Ciphers with Arbitrary Finite Domains"; 4^h < 4W, so under 4
// steps expected). So the global batch of step s is a function of (seed, s) alone, and dp rank r
// reads its contiguous slice of it: every dp layout sees the same samples at the same step,
// whatever the timing. The state to checkpoint is (seed, g).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace gridtrain {

class Sampler {
 public:
  /// tokens: the training split's length N; block_size T. Needs N >= T + 1 (checked when the
  /// data are loaded). Holds no per-window state.
  Sampler(std::uint64_t tokens, int block_size, std::uint64_t seed);
  /// A sampler over n items (images): each read once per epoch, window_start(g) the item's index.
  static Sampler items(std::uint64_t n, std::uint64_t seed) { return Sampler(n + 1, 1, seed); }

  std::uint64_t windows() const { return windows_; }
  /// Epoch of global sample index g.
  std::uint64_t epoch(std::uint64_t g) const { return g / windows_; }
  /// First token of the window read by global sample index g.
  std::uint64_t window_start(std::uint64_t g) const { return permute(g % windows_, epoch(g)) * block_; }

 private:
  /// perm_e(i) for i < W.
  std::uint64_t permute(std::uint64_t i, std::uint64_t e) const;
  int block_;
  std::uint64_t seed_;
  std::uint64_t windows_;
  int half_bits_;  // h: each Feistel half holds h bits
};

/// The sample order's name, recorded in checkpoints (/data attribute sampler): a resume of a file
/// written under another order is a change of data (Checkpointer's check_corpus).
inline constexpr const char* kSampleOrder = "feistel";

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
