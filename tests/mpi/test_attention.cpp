// model.attention: the fused kernel (at::scaled_dot_product_attention) computes what the
// written-out attention computes — loss and every gradient to 1e-5 relative in fp32 — on one rank,
// with tensor parallelism (local heads, tp = 2) and on a pipeline stage that takes activations,
// for the gpt and the llama (grouped-query heads); and decoding with a KV cache computes the
// logits of the whole window.
#include <catch2/catch.hpp>

#include "../support/training.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;
using test::rel;

namespace {

Config attention_config(Attention a, const std::string& family = "gpt") {
  Config c = parse_config("", "test", {});
  c.model.n_layer = 2, c.model.n_head = 4, c.model.n_embd = 32, c.model.block_size = 16;
  c.model.attention = a;
  return test::as_family(c, family);
}

// Loss (last stage: from ids (B, T) or activations (B, T, C)) and gradients of parameters and
// input, for the model of attention `a` on `layout`, from the same seed and data.
std::vector<torch::Tensor> loss_and_grads(Attention a, const std::string& family, const ModelLayout& layout,
                                          bool activations_in) {
  auto model = make_model(attention_config(a, family), DataShape{64}, layout);
  model->initialize(7);
  torch::manual_seed(11);
  const auto ids = torch::randint(0, 64, {3, 17}, torch::kLong);  // (B, T+1)
  auto x = activations_in ? torch::randn({3, 16, 32}).requires_grad_() : ids.slice(1, 0, 16);
  const auto loss = model->head_loss_sum(model->stage_forward(x), ids.slice(1, 1, 17)) / (3.0 * 16);
  loss.backward();
  std::vector<torch::Tensor> out{loss.detach()};
  for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
  if (activations_in) out.push_back(x.grad().clone());
  return out;
}

void check_same(const std::string& family, const ModelLayout& layout, bool activations_in) {
  const auto fused = loss_and_grads(Attention::Sdpa, family, layout, activations_in);
  const auto math = loss_and_grads(Attention::Math, family, layout, activations_in);
  REQUIRE(fused.size() == math.size());
  REQUIRE(fused.size() > 10);
  for (std::size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK(rel(fused[i], math[i]) <= 1e-5);
  }
}

}  // namespace

TEST_CASE("model.attention = sdpa computes the math path's loss and gradients", "[np2]") {
  const std::string family = GENERATE("gpt", "llama");
  CAPTURE(family);
  SECTION("one rank, the whole model") { check_same(family, {}, false); }
  SECTION("tp = 2: each rank its local heads") {
    Grid grid(MPI_COMM_WORLD, GridShape{1, 2, 1});
    check_same(family, {&grid.tp(), 0, 1, {{0, -1}}}, false);
  }
  SECTION("the last of two pipeline stages, from activations") { check_same(family, {nullptr, 1, 2, {{1, 1}}}, true); }
  SECTION("fused attention stores no (B, H, T, T) scores") {
    CHECK(plan_model(attention_config(Attention::Sdpa), DataShape{64}, {})->activation_bytes(4, 4, 1) <
          plan_model(attention_config(Attention::Math), DataShape{64}, {})->activation_bytes(4, 4, 1));
  }
}

TEST_CASE("decoding with a KV cache gives the logits of the whole window, position by position", "[np2]") {
  const std::string family = GENERATE("gpt", "llama");
  const auto attention = GENERATE(Attention::Sdpa, Attention::Math);
  CAPTURE(family, name_of(attention));
  auto model = make_model(attention_config(attention, family), DataShape{64});
  model->initialize(5);
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const auto ids = torch::randint(0, 64, {2, 16}, torch::kLong);  // (B, T): the whole context
  const auto want = model->logits(ids);                            // (B, T, V)
  KvCache cache;
  auto got = model->logits(ids.slice(1, 0, 5), &cache);  // a prompt of 5, then one token at a time
  for (std::int64_t t = 5; t < 16; ++t) got = torch::cat({got, model->logits(ids.slice(1, t, t + 1), &cache)}, 1);
  CHECK(cache.length == 16);
  CHECK(rel(got, want) <= 1e-5);
  CHECK_THROWS_WITH(model->logits(ids.slice(1, 0, 1), &cache), Catch::Contains("positions up to 17 are past the context of 16"));
}
