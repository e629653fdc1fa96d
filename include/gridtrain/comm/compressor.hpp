// Gradient compression for the data-parallel allreduce: the formats and their CPU kernels on
// host fp32 buffers (the cuda build adds device kernels, comm/device_comm.hpp).
//
//   fp16, bf16  casts (round to nearest even), no state;
//   onebit      1-bit sign compression with a scale per chunk and error feedback (Seide et al.
//               2014, "1-bit SGD"; Tang et al. 2021, "1-bit Adam"): c = x + r;
//               scale = ||c||₂ / sqrt(n); out = sign(c) · scale; r ← c − out.
//
// The exchange that uses them is parallel/compressed_allreduce.hpp. The CPU kernels are written
// to auto-vectorize (AVX2 clones where available).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

enum class CompressorKind { Fp16, Bf16, OneBit };
/// Where a compressor's buffers live: host memory (vectorized CPU loops) or a CUDA device (the
/// cuda build's kernels, queued on the compute stream).
enum class Memory { Host, Cuda };

/// The one factory of compressors. Throws std::runtime_error for Memory::Cuda in a CPU build.
std::unique_ptr<Compressor> make_compressor(CompressorKind kind, Memory where);

/// The cuda build's CUDA kernels of a compression format, on device pointers, queued on the
/// compute stream (src/comm/compressor_cuda.cu); reached through make_compressor(kind, Memory::Cuda).
std::unique_ptr<Compressor> make_cuda_compressor(CompressorKind kind);

}  // namespace gridtrain
