// Gradient compression for the data-parallel allreduce, on host fp32 buffers.
//
//   fp16, bf16  casts (round to nearest even), no state;
//   onebit      1-bit sign compression with a scale per chunk and error feedback (Seide et al.
//               2014, "1-bit SGD"; Tang et al. 2021, "1-bit Adam"): c = x + r;
//               scale = ||c||₂ / sqrt(n); out = sign(c) · scale; r ← c − out.
//
// compressed_allreduce_mean() is the two-phase compressed allreduce of the 1-bit Adam paper:
// every rank compresses its p chunks (worker error feedback) → all-to-all → each rank averages
// the p pieces of the chunk it owns in fp32 and compresses the result again (server error
// feedback) → all-gather → decompress. All ranks end with the same bytes, so replicas stay
// identical. The CPU kernels are written to auto-vectorize (AVX2 clones where available).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;
  /// Bytes of the compressed form of n floats.
  virtual std::size_t compressed_bytes(std::size_t n) const = 0;
  /// Whether compress() uses and updates an error-feedback residual.
  virtual bool error_feedback() const { return false; }
  /// Compresses x (n floats) into out (compressed_bytes(n) bytes). With error feedback, residual
  /// (n floats) is added to x first and then holds what the compression lost.
  virtual void compress(const float* x, std::size_t n, float* residual, unsigned char* out) const = 0;
  /// Writes the n values encoded in `in` to out.
  virtual void decompress(const unsigned char* in, std::size_t n, float* out) const = 0;
};

/// "fp16" | "bf16" | "onebit". Throws std::invalid_argument for anything else.
std::unique_ptr<Compressor> make_compressor(const std::string& name);

/// Error-feedback state of one buffer of n floats over an axis of p ranks.
struct FeedbackState {
  std::vector<float> worker;  ///< (n padded to a multiple of p,)
  std::vector<float> server;  ///< (n / p rounded up,) for the chunk this rank owns
};

/// Replaces data (n floats) by the mean over the axis, exchanged in compressed form. state is
/// used and updated when the compressor has error feedback (sized on first use). Returns the
/// bytes this rank sent. Collective over axis; label names the buffer in timeout errors.
std::size_t compressed_allreduce_mean(Axis& axis, const Compressor& c, float* data, std::size_t n,
                                      FeedbackState& state, const std::string& label);

}  // namespace gridtrain
