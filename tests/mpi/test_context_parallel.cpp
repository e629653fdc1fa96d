// Run under mpiexec -n 4 ([np4]): context parallelism's attention (parallel/context_parallel.hpp).
// The log-sum-exp merge alone equals one softmax over all the keys, rows that every block or
// some blocks mask whole included; ring attention at cp 1, 2 and 4 (the 4 ranks split into
// rings of cp) computes, for this rank's tokens of the load-balanced layout, the output and the
// q, k, v gradients of full causal attention over the whole sequence on one rank, with as many
// key/value heads as query heads and with grouped-query attention (2 of 4).
#include <catch2/catch.hpp>

#include <cmath>

#include "../support/training.hpp"
#include "gridtrain/parallel/context_parallel.hpp"

using namespace gridtrain;
using test::rel;

namespace {

// Masked softmax attention of q (..., Nq, D) over k, v (..., Nk, D) where `visible` (Nq, Nk);
// returns {out, lse}, out 0 and lse −inf on rows with no visible key.
std::pair<torch::Tensor, torch::Tensor> masked_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v, const torch::Tensor& visible) {
  const auto s = torch::matmul(q, k.transpose(-2, -1)).masked_fill(visible.logical_not(), -INFINITY);
  const auto lse = s.logsumexp(-1);
  return {torch::matmul(torch::exp(s - lse.unsqueeze(-1)).nan_to_num(0.0), v), lse};
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

}  // namespace

TEST_CASE("context parallel: the log-sum-exp merge of blocks is one softmax over all keys, masked rows included",
          "[np4]") {
  torch::manual_seed(5);
  const auto q = torch::randn({2, 3, 6, 4}), k = torch::randn({2, 3, 12, 4}), v = torch::randn({2, 3, 12, 4});
  auto visible = torch::rand({6, 12}) > 0.5;
  visible[0].fill_(false);                                     // no key at all: out 0, lse −inf
  visible[1].fill_(false), visible[1][11] = true;              // only the last block's last key
  const auto [want, want_lse] = masked_attention(q, k, v, visible);
  auto out = torch::zeros_like(want);
  auto lse = torch::full_like(want_lse, -INFINITY);
  for (int b = 0; b < 3; ++b) {  // three blocks of 4 keys, the first with row 1 masked whole
    const auto [o, l] = masked_attention(q, k.narrow(2, 4 * b, 4), v.narrow(2, 4 * b, 4), visible.narrow(1, 4 * b, 4));
    merge_attention(out, lse, o, l);
  }
  CHECK(max_rel(out, want) <= 1e-6);
  CHECK(torch::equal(out.select(2, 0), torch::zeros_like(out.select(2, 0))));
  CHECK(torch::isneginf(lse.select(2, 0)).all().item<bool>());
  const auto finite = torch::isfinite(want_lse);
  CHECK(torch::equal(torch::isfinite(lse), finite));
  CHECK(max_rel(lse.masked_select(finite), want_lse.masked_select(finite)) <= 1e-6);
}

TEST_CASE("context parallel: ring attention at cp 1, 2 and 4 computes full causal attention and its gradients, "
          "its blocks whole (T 16) and in query tiles (T 1024: 8, 2 and 1 tiles of kRingTileElements scores)", "[np4]") {
  const int rank = test::world_rank();
  Axis world("world", MPI_COMM_WORLD, 60.0);
  for (const std::int64_t T : {16, 1024})
  for (const int cp_size : {1, 2, 4})
    for (const std::int64_t kv_heads : {4, 2}) {
      CAPTURE(T, cp_size, kv_heads);
      const auto cp = world.split(rank / cp_size, rank, "cp");
      // The whole sequence, the same on every rank: B 2, H 4, T, D 8.
      torch::manual_seed(17);
      const auto q = torch::randn({2, 4, T, 8}, torch::requires_grad()), k = torch::randn({2, kv_heads, T, 8}, torch::requires_grad()),
                 v = torch::randn({2, kv_heads, T, 8}, torch::requires_grad()), upstream = torch::randn({2, 4, T, 8});
      const double scale = 1.0 / std::sqrt(8.0);
      const auto heads = [&](const torch::Tensor& t) { return t.repeat_interleave(4 / kv_heads, 1); };
      const auto ar = torch::arange(T);
      auto want = masked_attention(q * scale, heads(k), heads(v), ar.unsqueeze(1) >= ar.unsqueeze(0)).first;
      (want * upstream).sum().backward();
      // This rank's tokens, as leaves of their own.
      const auto mine = context_positions(T, cp->rank(), cp->size());
      auto local = [&](const torch::Tensor& t) { return t.detach().index_select(2, mine).requires_grad_(); };
      const auto lq = local(q), lk = local(k), lv = local(v);
      const auto got = ring_attention(lq, lk, lv, scale, *cp);
      (got * upstream.index_select(2, mine)).sum().backward();
      CHECK(max_rel(got, want.detach().index_select(2, mine)) <= 1e-5);
      CHECK(max_rel(lq.grad(), q.grad().index_select(2, mine)) <= 1e-5);
      CHECK(max_rel(lk.grad(), k.grad().index_select(2, mine)) <= 1e-5);
      CHECK(max_rel(lv.grad(), v.grad().index_select(2, mine)) <= 1e-5);
    }
}

TEST_CASE("context parallel: the load-balanced layout gives rank i chunks i and 2cp - 1 - i", "[np4]") {
  CHECK(torch::equal(context_positions(16, 1, 4), torch::tensor({2, 3, 12, 13}, torch::kLong)));
  CHECK(torch::equal(context_positions(16, 0, 1), torch::arange(16)));
  const auto all = torch::cat({context_positions(16, 0, 4), context_positions(16, 1, 4), context_positions(16, 2, 4),
                               context_positions(16, 3, 4)});
  CHECK(torch::equal(std::get<0>(all.sort()), torch::arange(16)));  // every position once over the ranks
}
