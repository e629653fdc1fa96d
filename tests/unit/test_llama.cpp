// The llama's plan against the module it builds (parameter count, the 6N + 12LCT FLOPs with N the
// SwiGLU and grouped-query count, Llama's SwiGLU width rule), and its keys and layouts refused by
// name. (Its numerics are proved against transformers: tests/interop.)
#include <catch2/catch.hpp>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/registry.hpp"
#include "../support/config_problems.hpp"

using namespace gridtrain;

namespace {

Config llama(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> args = {"--model.type=llama", "--model.n_layer=3", "--model.n_head=4", "--model.n_kv_head=2",
                                   "--model.n_embd=64", "--model.block_size=32", "--model.multiple_of=32"};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return parse_config("", "test", args);
}

}  // namespace

TEST_CASE("llama: the plan counts what the module holds, and the FLOPs are 6N + 12LCT", "[llama]") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    const Config c = llama({tied ? "--model.tie_embeddings=true" : "--model.tie_embeddings=false"});
    const DataShape data{100};
    const auto model = make_model(c, data);
    const auto plan = plan_model(c, data, {});
    const std::int64_t held = count_parameters(*model);
    CHECK(plan->parameters() == held);
    // F = 32 · ceil(floor(8 · 64 / 3) / 32) = 32 · ceil(170 / 32) = 192; per layer q, o (64 × 64),
    // k, v (32 × 64: 2 of 4 heads), gate, up, down (192 × 64), two norms.
    const std::int64_t per_layer = 2 * 64 * 64 + 2 * 32 * 64 + 3 * 192 * 64 + 2 * 64;
    CHECK(held == 3 * per_layer + 64 + (tied ? 1 : 2) * 100 * 64);
    // N counts the vocabulary matrix once (the head): an untied input embedding is a lookup.
    const double n = 3.0 * per_layer + 64 + 100 * 64;
    CHECK(plan->flops_per_item() == Approx(6 * n + 12.0 * 3 * 64 * 32));
  }
}

TEST_CASE("llama: keys and layouts it cannot compute are refused by name", "[llama]") {
  CHECK_THAT(test::config_problems({"--model.type=llama", "--model.n_head=4", "--model.n_kv_head=3"}),
             Catch::Contains("model.n_kv_head = 3 does not divide model.n_head = 4"));
  CHECK_THAT(test::config_problems({"--model.type=llama", "--model.n_head=4", "--model.n_embd=12"}),
             Catch::Contains("model.n_embd / model.n_head = 3 is odd"));
  CHECK_THAT(test::config_problems({"--model.n_kv_head=2"}), Catch::Contains("model.n_kv_head = 2 is a llama key"));
  const auto layout = model_layout_problems(llama(), 4, 1);
  REQUIRE(layout.size() == 1);
  CHECK_THAT(layout[0], Catch::Contains("model.n_kv_head = 2 is not divisible by grid.tp = 4"));
  CHECK(model_layout_problems(llama(), 2, 1).empty());
  CHECK_THAT(model_layout_problems(llama({"--model.ffn_hidden=190"}), 4, 1).back(),
             Catch::Contains("the SwiGLU width 190 (model.ffn_hidden) is not divisible by grid.tp = 4"));
}
