// CUDA kernels for comm/compressor.hpp's formats, byte for byte the CPU layout (cuda build
// only). All work is queued on CUDA's legacy default stream, LibTorch's compute stream, so it
// is ordered with the tensors it reads and writes; nothing here synchronizes with the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gridtrain/comm/compressor.hpp"
#include "gridtrain/comm/device_comm.hpp"

namespace gridtrain {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b ? b : 1) : 4096);  // grid-stride loops cover the rest
}

__global__ void to_fp16(const float* x, std::size_t n, __half* h) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    h[i] = __float2half_rn(x[i]);
}

__global__ void from_fp16(const __half* h, std::size_t n, float* out) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __half2float(h[i]);
}

// Same rounding and NaN rule as the CPU kernel (not __float2bfloat16_rn, whose NaN differs).
__global__ void to_bf16(const float* x, std::size_t n, std::uint16_t* h) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const std::uint32_t u = __float_as_uint(x[i]);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    h[i] = static_cast<std::uint16_t>(nan ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

__global__ void from_bf16(const std::uint16_t* h, std::size_t n, float* out) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __uint_as_float(static_cast<std::uint32_t>(h[i]) << 16);
}

// r ← r + x, and *sq += Σ r² (fp64, block partial sums then one atomic per block).
__global__ void add_and_square(const float* x, std::size_t n, float* r, double* sq) {
  __shared__ double partial[kThreads];
  double s = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = r[i] + x[i];
    r[i] = v;
    s += static_cast<double>(v) * v;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sq, partial[0]);
}

__device__ float scale_of(const double* sq, std::size_t n) {
  return n ? static_cast<float>(sqrt(*sq / static_cast<double>(n))) : 0.0f;
}

// One thread per output byte: the signs of 8 elements (bit k = element 8·byte + k, 1 =
// negative), leaving r − sign(r)·scale in r. Thread 0 also writes the fp32 scale header.
__global__ void pack_signs(float* r, std::size_t n, const double* sq, unsigned char* out) {
  const float scale = scale_of(sq, n);
  if (blockIdx.x == 0 && threadIdx.x == 0) memcpy(out, &scale, 4);  // the header may be unaligned
  unsigned char* bits = out + 4;
  for (std::size_t byte = blockIdx.x * blockDim.x + threadIdx.x; byte < (n + 7) / 8; byte += gridDim.x * blockDim.x) {
    unsigned char b = 0;
    for (std::size_t k = 0; k < 8 && byte * 8 + k < n; ++k) {
      float& v = r[byte * 8 + k];
      const bool neg = signbit(v);
      b |= static_cast<unsigned char>(neg << k);
      v -= neg ? -scale : scale;
    }
    bits[byte] = b;
  }
}

__global__ void unpack_signs(const unsigned char* in, std::size_t n, float* out) {
  float scale;
  memcpy(&scale, in, 4);
  const unsigned char* bits = in + 4;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = (bits[i / 8] >> (i % 8)) & 1 ? -scale : scale;
}

class CudaFp16 : public Compressor {
 public:
  std::string name() const override { return "fp16"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 2 * n; }
  void compress(const float* x, std::size_t n, float*, unsigned char* out) const override {
    to_fp16<<<blocks_for(n), kThreads>>>(x, n, reinterpret_cast<__half*>(out));
    check(cudaGetLastError(), "fp16 compress");
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    from_fp16<<<blocks_for(n), kThreads>>>(reinterpret_cast<const __half*>(in), n, out);
    check(cudaGetLastError(), "fp16 decompress");
  }
};

class CudaBf16 : public Compressor {
 public:
  std::string name() const override { return "bf16"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 2 * n; }
  void compress(const float* x, std::size_t n, float*, unsigned char* out) const override {
    to_bf16<<<blocks_for(n), kThreads>>>(x, n, reinterpret_cast<std::uint16_t*>(out));
    check(cudaGetLastError(), "bf16 compress");
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    from_bf16<<<blocks_for(n), kThreads>>>(reinterpret_cast<const std::uint16_t*>(in), n, out);
    check(cudaGetLastError(), "bf16 decompress");
  }
};

class CudaOneBit : public Compressor {
 public:
  CudaOneBit() { check(cudaMalloc(&sq_, sizeof(double)), "cudaMalloc"); }
  ~CudaOneBit() override { cudaFree(sq_); }
  std::string name() const override { return "onebit"; }
  std::size_t compressed_bytes(std::size_t n) const override { return 4 + (n + 7) / 8; }
  bool error_feedback() const override { return true; }
  // One scratch fp64 for ||c||²: calls are serialized on the stream, so it is reused safely.
  void compress(const float* x, std::size_t n, float* r, unsigned char* out) const override {
    check(cudaMemsetAsync(sq_, 0, sizeof(double), cudaStreamLegacy), "cudaMemsetAsync");
    add_and_square<<<blocks_for(n), kThreads>>>(x, n, r, sq_);
    pack_signs<<<blocks_for((n + 7) / 8), kThreads>>>(r, n, sq_, out);
    check(cudaGetLastError(), "onebit compress");
  }
  void decompress(const unsigned char* in, std::size_t n, float* out) const override {
    unpack_signs<<<blocks_for(n), kThreads>>>(in, n, out);
    check(cudaGetLastError(), "onebit decompress");
  }

 private:
  double* sq_ = nullptr;
};

}  // namespace

std::unique_ptr<Compressor> make_cuda_compressor(CompressorKind kind) {
  switch (kind) {
    case CompressorKind::Fp16: return std::make_unique<CudaFp16>();
    case CompressorKind::Bf16: return std::make_unique<CudaBf16>();
    case CompressorKind::OneBit: break;
  }
  return std::make_unique<CudaOneBit>();
}

}  // namespace gridtrain
