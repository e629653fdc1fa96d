// The fused GELU (tanh approximation) of gelu.hpp: AVX2 + FMA kernels for the forward and the
// backward, an autograd function around them, and ATen's gelu wherever they do not apply.
#include "gridtrain/model/gelu.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>
#include <torch/autograd.h>

namespace gridtrain {
namespace {

constexpr float kTwoBeta = 2.0f * 0.7978845608028654f;  // 2 √(2/π): u = 2z = kTwoBeta (x + kKappa x³)
constexpr float kKappa = 0.044715f;

// Scalar forms of the two kernels, for the last n % 8 elements; e^(−2z) clamped as exp8 below.
float exp_neg_2z(float x) { return std::exp(std::clamp(-kTwoBeta * x * (1.0f + kKappa * x * x), -88.0f, 88.0f)); }
float forward_one(float x) { return x / (1.0f + exp_neg_2z(x)); }
float backward_one(float dy, float x) {
  const float e = exp_neg_2z(x), s = 1.0f / (1.0f + e);
  return dy * (s + x * s * (s * e) * kTwoBeta * (1.0f + 3.0f * kKappa * x * x));
}

// e^x for 8 floats (Cephes expf): e^x = 2^n e^r with n = round(x / ln 2) and r = x − n ln 2 in
// [−ln 2 / 2, ln 2 / 2], ln 2 split in two parts so that r is exact, e^r by Cephes' fitted
// degree-7 polynomial (relative error below 2e-7). x is clamped to [−88, 88], where e^x
// is 0 (n = −127 builds a zero) at the low end and 1.7e38 at the high one: finite, so that s·e
// below stays a number where σ underflows to 0. A NaN x comes out finite here; the callers
// multiply by x, which carries it through.
__attribute__((target("avx2,fma"))) __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// e = e^(−2z) and s = σ(2z) = 1 / (1 + e) for 8 floats. 1 − s is s·e, without the cancellation of
// 1 − s where s is near 1.
struct Sigmoid8 {
  __m256 e, s;
};
__attribute__((target("avx2,fma"))) Sigmoid8 sigmoid_2z(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kTwoBeta), x),
                                 _mm256_fmadd_ps(_mm256_set1_ps(kKappa), x2, _mm256_set1_ps(1.0f)));
  const __m256 one = _mm256_set1_ps(1.0f), e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), u));
  return {e, _mm256_div_ps(one, _mm256_add_ps(one, e))};
}

__attribute__((target("avx2,fma"))) void forward_kernel(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, sigmoid_2z(v).s));
  }
  for (; i < n; ++i) y[i] = forward_one(x[i]);
}

__attribute__((target("avx2,fma"))) void backward_kernel(const float* dy, const float* x, float* dx, std::int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const auto [e, s] = sigmoid_2z(v);
    // gelu' = s + x s (1 − s) du/dx with 1 − s = s e and du/dx = kTwoBeta (1 + 3 kKappa x²)
    const __m256 du = _mm256_mul_ps(_mm256_set1_ps(kTwoBeta),
                                    _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kKappa), _mm256_mul_ps(v, v), one));
    const __m256 grad = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(v, s), _mm256_mul_ps(s, e)), du, s);
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), grad));
  }
  for (; i < n; ++i) dx[i] = backward_one(dy[i], x[i]);
}

// Element-wise, so the ranges at::parallel_for hands each thread are independent.
template <class Kernel>
void in_parallel(std::int64_t n, Kernel kernel) {
  at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](std::int64_t begin, std::int64_t end) { kernel(begin, end - begin); });
}

struct FusedGelu : torch::autograd::Function<FusedGelu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    in_parallel(x.numel(), [&](std::int64_t at, std::int64_t n) { forward_kernel(in + at, out + at, n); });
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const auto dy = grads[0].contiguous();
    auto dx = torch::empty_like(x);
    const float *g = dy.data_ptr<float>(), *in = x.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    in_parallel(x.numel(), [&](std::int64_t at, std::int64_t n) { backward_kernel(g + at, in + at, out + at, n); });
    return {dx};
  }
};

}  // namespace

bool fused_gelu_available() {
  static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return available;
}

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  if (x.is_cpu() && x.scalar_type() == torch::kFloat && x.is_contiguous() && fused_gelu_available())
    return FusedGelu::apply(x);
  return torch::gelu(x, "tanh");
}

}  // namespace gridtrain
