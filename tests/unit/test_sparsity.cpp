// Dynamic sparse training's arithmetic: ERK densities against the RigL paper's definition, the
// gmp / set / rigl schedules, the order keys, and top-k selection against a sort on one rank.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <random>

#include "gridtrain/sparse/schedule.hpp"
#include "gridtrain/sparse/top_k.hpp"

using namespace gridtrain;

namespace {

double elements(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), 1.0, [](double a, std::int64_t d) { return a * static_cast<double>(d); });
}

}  // namespace

TEST_CASE("erk densities keep the uniform number of zeros, scale as (sum of dims)/(product), and cap at 1", "[sparse]") {
  const std::vector<std::vector<std::int64_t>> shapes = {{64, 32, 3, 3}, {128, 64}, {10, 3136}, {512, 512}};
  for (double target : {0.5, 0.8, 0.9}) {
    CAPTURE(target);
    const auto d = final_densities(SparsityDistribution::Erk, target, shapes);
    double kept = 0, all = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) kept += d[i] * elements(shapes[i]), all += elements(shapes[i]);
    CHECK(kept == Approx((1.0 - target) * all).epsilon(1e-12));
    // Uncapped tensors: d_i / d_j = raw_i / raw_j, raw = Σ dims / Π dims.
    auto raw = [&](std::size_t i) {
      return std::accumulate(shapes[i].begin(), shapes[i].end(), 0.0) / elements(shapes[i]);
    };
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      CHECK(d[i] <= 1.0);
      if (d[i] < 1.0 && d[3] < 1.0) CHECK(d[i] / d[3] == Approx(raw(i) / raw(3)).epsilon(1e-12));
    }
    CHECK(d[0] > d[3]);  // the conv kernel's ERK density is higher than the big square matrix's
  }
  // A 4x4 matrix beside a 1000x1000 one at 50 %: ε = 500008 / 2008 would give it 124, so it stays
  // dense and the large one takes all the zeros: 1 - 500008 / 10^6.
  const auto capped = final_densities(SparsityDistribution::Erk, 0.5, {{4, 4}, {1000, 1000}});
  CHECK(capped[0] == 1.0);
  CHECK(capped[1] == Approx(1.0 - 500008.0 / 1e6).epsilon(1e-12));
  const auto uniform = final_densities(SparsityDistribution::Uniform, 0.8, shapes);
  for (const double x : uniform) CHECK(x == Approx(0.2));
  CHECK_THROWS_AS(final_densities(SparsityDistribution::Erk, 1.0, shapes), std::invalid_argument);
}

TEST_CASE("gmp follows Zhu & Gupta's cubic at its mask updates; rigl's drop fraction is a cosine; set's constant",
          "[sparse]") {
  Config::Sparsity s;
  s.method = SparsityMethod::Gmp;
  s.start = 10, s.end = 45, s.interval = 10;
  const SparsitySchedule gmp(s, 100);
  for (long long t : {10, 20, 30, 40, 45}) CHECK(gmp.updates_at(t));
  for (long long t : {0, 9, 15, 46, 50, 60}) CHECK_FALSE(gmp.updates_at(t));
  auto cubic = [](double progress) { return 1.0 - 0.8 * (1.0 - std::pow(1.0 - progress, 3.0)); };
  CHECK(gmp.density(0.2, 5) == 1.0);
  CHECK(gmp.density(0.2, 10) == Approx(1.0));
  CHECK(gmp.density(0.2, 20) == Approx(cubic(10.0 / 35.0)));
  CHECK(gmp.density(0.2, 29) == Approx(cubic(10.0 / 35.0)));  // held until the next update
  CHECK(gmp.density(0.2, 40) == Approx(cubic(30.0 / 35.0)));
  CHECK(gmp.density(0.2, 45) == Approx(0.2));
  CHECK(gmp.density(0.2, 99) == Approx(0.2));
  CHECK(gmp.drop_fraction(20) == 0.0);

  s.method = SparsityMethod::Rigl;
  s.start = 0, s.end = 0, s.interval = 100, s.drop_fraction = 0.3;
  const SparsitySchedule rigl(s, 4000);  // end = 3/4 of the steps: RigL's T_end
  CHECK(rigl.end() == 3000);
  CHECK(rigl.drop_fraction(0) == Approx(0.3));
  CHECK(rigl.drop_fraction(1500) == Approx(0.15));
  CHECK(rigl.drop_fraction(1000) == Approx(0.15 * (1.0 + std::cos(std::numbers::pi / 3.0))));
  CHECK(rigl.drop_fraction(3000) == Approx(0.0).margin(1e-15));
  CHECK(rigl.density(0.1, 0) == 0.1);  // pruned to the target at start
  s.method = SparsityMethod::Set;
  CHECK(SparsitySchedule(s, 4000).drop_fraction(2000) == 0.3);
}

TEST_CASE("order keys: |x|'s fp32 bits order as |x|; random keys depend on (seed, step, name, index) only", "[sparse]") {
  const auto x = torch::tensor({-3.0f, 0.5f, -0.0f, 2.0f, 1e-30f});
  const auto key = magnitude_key(x);
  CHECK(key.dtype() == torch::kInt);
  CHECK(torch::equal(torch::argsort(key), torch::argsort(x.abs())));
  CHECK(key[2].item<int>() == 0);
  const auto index = torch::arange(20000, torch::kLong);
  const auto a = random_key(7, 100, "h.0.mlp.c_fc.weight", index);
  CHECK(torch::equal(a, random_key(7, 100, "h.0.mlp.c_fc.weight", index)));
  CHECK(torch::equal(a.narrow(0, 500, 100), random_key(7, 100, "h.0.mlp.c_fc.weight", index.narrow(0, 500, 100))));
  CHECK_FALSE(torch::equal(a, random_key(7, 101, "h.0.mlp.c_fc.weight", index)));
  CHECK_FALSE(torch::equal(a, random_key(7, 100, "h.1.mlp.c_fc.weight", index)));
  CHECK(a.min().item<int>() >= 0);
  CHECK(a.to(torch::kDouble).mean().item<double>() == Approx(std::ldexp(1.0, 30)).epsilon(0.02));
}

TEST_CASE("top-k on one rank: the k largest keys, ties to the smaller global index, non-candidates never", "[sparse]") {
  std::mt19937 rng(5);
  const std::int64_t n = 1000;
  std::vector<std::int32_t> keys(n);
  for (auto& k : keys) k = static_cast<std::int32_t>(rng() % 7) - 1;  // -1 (not a candidate) .. 5: many ties
  std::vector<std::int64_t> index(n);
  std::iota(index.begin(), index.end(), 0);
  std::shuffle(index.begin(), index.end(), rng);
  const auto keys_t = torch::tensor(std::vector<int>(keys.begin(), keys.end()), torch::kInt);
  const auto index_t = torch::tensor(index, torch::kLong);
  std::vector<std::int64_t> order;  // the reference: candidates by key descending, then index ascending
  for (std::int64_t i = 0; i < n; ++i)
    if (keys[i] >= 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return keys[a] != keys[b] ? keys[a] > keys[b] : index[a] < index[b];
  });
  const auto candidates = static_cast<std::int64_t>(order.size());
  for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{137}, candidates / 2, candidates, n}) {
    CAPTURE(k);
    const auto got = select_top_k({{keys_t, index_t, n, k, true}}, [](std::vector<double>&) {})[0];
    auto want = torch::zeros({n}, torch::kBool);
    for (std::int64_t i = 0; i < std::min(k, candidates); ++i) want[order[i]] = true;
    CHECK(torch::equal(got, want));
  }
}
