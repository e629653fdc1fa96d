#include "gridtrain/comm/compressor.hpp"

#include "gridtrain/comm/half.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>


namespace gridtrain {
namespace {

// The 1-bit kernels, cloned for x86-64-v3 (AVX2, FMA) so that the loops run 8 lanes wide where
// the CPU has it (the 2-byte conversions are comm/half.hpp's).
#define GT_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

// r ← r + x; returns ||r||₂² (fp64 accumulation).
GT_VECTOR_CLONES double add_and_square(const float* x, std::size_t n, float* r) {
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    r[i] += x[i];
    sq += static_cast<double>(r[i]) * r[i];
  }
  return sq;
}

// Packs the signs of r into bits (1 = negative) and leaves r − sign(r)·scale in r.
GT_VECTOR_CLONES void pack_signs(float* r, std::size_t n, float scale, unsigned char* bits) {
  for (std::size_t byte = 0; byte < (n + 7) / 8; ++byte) {
    unsigned char b = 0;
    for (std::size_t k = 0; k < 8 && byte * 8 + k < n; ++k) {
      float& v = r[byte * 8 + k];
      const bool neg = std::signbit(v);
      b |= static_cast<unsigned char>(neg << k);
      v -= neg ? -scale : scale;
    }
    bits[byte] = b;
  }
}

GT_VECTOR_CLONES void unpack_signs(const unsigned char* bits, std::size_t n, float scale, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1 ? -scale : scale;
}

#undef GT_VECTOR_CLONES

class Fp16 : public Compressor {
 public:
  std::string name() const override { return "fp16"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 2 * n; }
  void compress(const float* x, std::size_t n, float*, unsigned char* out) const override {
    to_fp16(x, n, reinterpret_cast<std::uint16_t*>(out));
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    from_fp16(reinterpret_cast<const std::uint16_t*>(in), n, out);
  }
};

class Bf16 : public Compressor {
 public:
  std::string name() const override { return "bf16"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 2 * n; }
  void compress(const float* x, std::size_t n, float*, unsigned char* out) const override {
    to_bf16(x, n, reinterpret_cast<std::uint16_t*>(out));
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    from_bf16(reinterpret_cast<const std::uint16_t*>(in), n, out);
  }
};

// Layout: fp32 scale, then ceil(n/8) bytes of sign bits (bit i%8 of byte i/8; 1 = negative).
class OneBit : public Compressor {
 public:
  std::string name() const override { return "onebit"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 4 + (n + 7) / 8; }
  bool error_feedback() const override { return true; }
  void compress(const float* x, std::size_t n, float* r, unsigned char* out) const override {
    const double sq = add_and_square(x, n, r);  // r = c = x + residual
    const float scale = n ? static_cast<float>(std::sqrt(sq / static_cast<double>(n))) : 0.0f;
    std::memcpy(out, &scale, 4);
    pack_signs(r, n, scale, out + 4);
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    unpack_signs(in + 4, n, scale, out);
  }
};

}  // namespace

std::unique_ptr<Compressor> make_compressor(CompressorKind kind, Memory where) {
#ifdef GRIDTRAIN_CUDA
  if (where == Memory::Cuda) return make_cuda_compressor(kind);
#else
  if (where == Memory::Cuda)
    throw std::runtime_error("gradient compression on a CUDA device needs the GPU build of gridtrain "
                             "(configure where nvcc is found, or with -DGRIDTRAIN_CUDA=ON); this one was built for CPU only");
#endif
  switch (kind) {
    case CompressorKind::Fp16: return std::make_unique<Fp16>();
    case CompressorKind::Bf16: return std::make_unique<Bf16>();
    case CompressorKind::OneBit: break;
  }
  return std::make_unique<OneBit>();
}

}  // namespace gridtrain
