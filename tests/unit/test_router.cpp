// The MoE router (model/router.hpp) against its definitions, token by token: softmax and
// DeepSeek-V3's sigmoid scores, the expert bias moving the choice but not the weights, forced
// balanced routing, the training-only expert count, fp32 state under 2-byte weights, and the
// bias's move after a step.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include <algorithm>
#include <numeric>

#include "gridtrain/model/router.hpp"

using namespace gridtrain;
using gridtrain::moe::Router;

namespace {

// Token n's k experts by largest score (ties to the lower index) and their scores.
std::vector<std::int64_t> top_experts(const torch::Tensor& score_row, std::int64_t k) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(score_row.size(0)));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return score_row[a].item<double>() > score_row[b].item<double>();
  });
  order.resize(static_cast<std::size_t>(k));
  return order;
}

}  // namespace

TEST_CASE("router: softmax and sigmoid scores, top-k by score + bias, weights from the scores alone", "[moe]") {
  torch::manual_seed(11);
  const std::int64_t N = 12, C = 8, E = 6, k = 2;
  for (const auto type : {MoeRouter::Softmax, MoeRouter::Sigmoid})
    for (const bool norm : {true, false})
      for (const double rate : {0.0, 1e-3}) {
        CAPTURE(name_of(type), norm, rate);
        Router router(C, E, k, type, norm, rate);
        if (rate > 0) router.e_score_correction_bias.copy_(torch::tensor({0.0, 0.3, -0.2, 0.0, 0.1, 0.5}));
        const auto x = torch::randn({N, C});
        const auto r = router.forward(x, N);
        const auto logits = torch::matmul(x, router.weight.detach().t());
        CHECK(torch::allclose(r.logits, logits, 1e-6, 1e-6));
        const auto scores = type == MoeRouter::Sigmoid ? logits.sigmoid() : logits.softmax(-1);
        CHECK(torch::allclose(r.probs, scores / scores.sum(-1, true), 1e-6, 1e-6));  // softmax rows sum to 1
        for (std::int64_t n = 0; n < N; ++n) {
          CAPTURE(n);
          const auto choice = rate > 0 ? scores[n] + router.e_score_correction_bias : scores[n];
          const auto want = top_experts(choice, k);
          double total = 0;
          for (std::int64_t j = 0; j < k; ++j) total += scores[n][want[static_cast<std::size_t>(j)]].item<double>();
          for (std::int64_t j = 0; j < k; ++j) {
            const auto e = want[static_cast<std::size_t>(j)];
            CHECK(r.chosen[n][j].item<std::int64_t>() == e);
            const double w = scores[n][e].item<double>() / (norm ? total : 1.0);
            CHECK(r.weights[n][j].item<double>() == Approx(w).epsilon(1e-6));
          }
        }
        if (rate > 0) {  // the bias steers the choice, and no gradient reaches it
          r.weights.sum().backward();
          CHECK(!router.e_score_correction_bias.requires_grad());
          CHECK(router.weight.grad().abs().sum().item<double>() > 0);
        }
      }
}

TEST_CASE("router: a large bias sends every token to its expert; the count is of training forwards only", "[moe]") {
  torch::manual_seed(12);
  const std::int64_t N = 10, C = 4, E = 4;
  Router router(C, E, 1, MoeRouter::Sigmoid, true, 1e-3);
  router.e_score_correction_bias.copy_(torch::tensor({0.0, 0.0, 5.0, 0.0}));  // sigmoid scores lie in (0, 1)
  const auto x = torch::randn({N, C});
  const auto r = router.forward(x, N);
  CHECK(torch::equal(r.chosen, torch::full({N, 1}, 2, torch::kLong)));
  CHECK(torch::allclose(r.weights, torch::ones({N, 1})));  // one expert, renormalized
  CHECK(torch::equal(router.tokens_per_expert, torch::tensor({0.0f, 0.0f, 10.0f, 0.0f})));
  {
    torch::NoGradGuard validation;
    router.forward(x, N);
  }
  CHECK(router.tokens_per_expert[2].item<float>() == 10.0f);
  router.to(torch::kBFloat16);  // 2-byte weights: the bias and count stay fp32
  CHECK(router.weight.scalar_type() == torch::kBFloat16);
  CHECK(router.e_score_correction_bias.scalar_type() == torch::kFloat);
  CHECK(router.tokens_per_expert.scalar_type() == torch::kFloat);
  CHECK(router.e_score_correction_bias[2].item<float>() == 5.0f);
}

TEST_CASE("router: balanced routing sends position t to experts (t*k + j) mod E, every expert T*k/E", "[moe]") {
  torch::manual_seed(13);
  const std::int64_t B = 3, T = 8, C = 4, E = 4, k = 2;
  Router router(C, E, k, MoeRouter::Balanced, true, 0.0);
  const auto x = torch::randn({B * T, C});
  const auto r = router.forward(x, T);
  const auto p = r.logits.softmax(-1);
  for (std::int64_t n = 0; n < B * T; ++n)
    for (std::int64_t j = 0; j < k; ++j) {
      const auto e = ((n % T) * k + j) % E;
      CHECK(r.chosen[n][j].item<std::int64_t>() == e);
      const double total = p[n][(n % T) * k % E].item<double>() + p[n][((n % T) * k + 1) % E].item<double>();
      CHECK(r.weights[n][j].item<double>() == Approx(p[n][e].item<double>() / total).epsilon(1e-6));
    }
  const auto counts = torch::bincount(r.chosen.reshape({-1}), {}, E);
  CHECK(torch::equal(counts, torch::full({E}, B * T * k / E, torch::kLong)));
  r.weights.sum().backward();  // the router still trains
  CHECK(router.weight.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("router: the expert bias moves by +rate below the mean load, -rate above it, not at it", "[moe]") {
  const auto counts = torch::tensor({{3.0, 1.0, 2.0, 2.0}, {0.0, 0.0, 0.0, 8.0}});
  const auto step = moe::expert_bias_step(counts, 0.5);
  CHECK(torch::equal(step, torch::tensor({{-0.5, 0.5, 0.0, 0.0}, {0.5, 0.5, 0.5, -0.5}})));
}
