// Causal attention at query/key offsets (lm::causal_attention, what context parallelism's chunks
// need): a block of queries in the middle of the window, over the keys up to its end, gives the
// rows of the whole window's attention, on the math path and through sdpa; grouped-query heads
// alike; the math path's mask is cached and rebuilt only when sizes or offsets change; keys that
// start after the queries are refused.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include "gridtrain/model/language_model.hpp"

using namespace gridtrain;

namespace {

// Largest |a - b| relative to max |b|.
double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

}  // namespace

TEST_CASE("causal attention at offsets gives the rows of the whole window's", "[attention]") {
  torch::manual_seed(7);
  const std::int64_t B = 2, H = 4, T = 12, D = 8;
  for (const std::int64_t Hkv : {H, H / 2}) {
    const auto q = torch::randn({B, H, T, D}), k = torch::randn({B, Hkv, T, D}), v = torch::randn({B, Hkv, T, D});
    for (const bool fused : {false, true}) {
      CAPTURE(Hkv, fused);
      const auto whole = lm::causal_attention(q, k, v, fused);
      // Queries [4, 9) over keys [0, 9): what a context-parallel rank holding that chunk computes.
      const auto part = lm::causal_attention(q.slice(2, 4, 9), k.slice(2, 0, 9), v.slice(2, 0, 9), fused, {4, 0});
      // The fp32 rounding of the same sums in another order: far below any masking error, which
      // would mix in whole rows of other positions (differences of order 1).
      CHECK(rel_diff(part, whole.slice(2, 4, 9)) < 1e-5);
      // Queries [4, 9) over keys [2, 9): a window that drops the first two keys.
      const auto windowed = lm::causal_attention(q.slice(2, 4, 9), k.slice(2, 2, 9), v.slice(2, 2, 9), fused, {4, 2});
      const auto manual = lm::causal_attention(q.slice(2, 2, 9), k.slice(2, 2, 9), v.slice(2, 2, 9), fused, {2, 2});
      CHECK(rel_diff(windowed, manual.slice(2, 2, 7)) < 1e-5);
    }
  }
}

TEST_CASE("the math path's causal mask is cached and rebuilt when the shape or offsets change", "[attention]") {
  lm::CausalMask masks;
  const torch::Device cpu(torch::kCPU);
  const auto* first = masks.get(5, 9, {4, 0}, cpu).data_ptr();
  CHECK(masks.get(5, 9, {4, 0}, cpu).data_ptr() == first);  // the same tensor: not built again
  const auto& mask = masks.get(5, 9, {4, 0}, cpu);
  CHECK(mask.sizes() == torch::IntArrayRef({5, 9}));
  // Query i at 4 + i sees keys 0 .. 4 + i: the row's masked keys are those after it.
  for (std::int64_t i = 0; i < 5; ++i) CHECK(mask[i].sum().item<std::int64_t>() == 9 - (5 + i));
  const auto& other = masks.get(5, 9, {3, 0}, cpu);
  CHECK(other[0].sum().item<std::int64_t>() == 9 - 4);  // rebuilt for the new offset
}

TEST_CASE("causal attention refuses keys that start after the queries", "[attention]") {
  const auto q = torch::randn({1, 1, 2, 4}), k = torch::randn({1, 1, 2, 4});
  CHECK_THROWS_WITH(lm::causal_attention(q, k, k, false, {0, 1}), Catch::Contains("valid: key offset <= query offset"));
}
