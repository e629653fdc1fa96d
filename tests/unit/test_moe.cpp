// Mixture of experts (model/moe.hpp): the balancing losses against their formulas at perfect
// balance and at collapse, the MoE MLP against a token-by-token evaluation of its definition,
// the llama's plan and the MoE cost accounting per pipeline stage against the modules they
// describe, training's loss against validation's, and the [moe]
// keys refused by name, all at once.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/llama.hpp"
#include "gridtrain/model/moe.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/plan/moe_costs.hpp"
#include "../support/config_problems.hpp"

using namespace gridtrain;

namespace {

moe::MoeShape shape(std::int64_t experts, std::int64_t k) {
  moe::MoeShape s;
  s.experts = experts, s.top_k = k, s.ffn_hidden = 8, s.aux_loss_coeff = 1.0;
  return s;
}

}  // namespace

TEST_CASE("moe: the load-balancing loss is k at perfect balance and E at collapse; the z-loss is mean logsumexp^2",
          "[moe]") {
  for (const auto& [E, k] : {std::pair<std::int64_t, std::int64_t>{4, 1}, {8, 2}, {6, 3}}) {
    CAPTURE(E, k);
    const std::int64_t N = 4 * E;
    {  // uniform probabilities, token n choosing experts n, n + 1, ... (mod E): every expert k/E of the time
      moe::RouterLog log(shape(E, k));
      const auto logits = torch::zeros({N, E});
      const auto chosen = (torch::arange(N).unsqueeze(1) + torch::arange(k).unsqueeze(0)).remainder(E);
      for (int layer = 0; layer < 2; ++layer) log.add(layer, logits, logits.softmax(-1), chosen);
      CHECK(log.aux_loss().item<double>() == Approx(static_cast<double>(k)).epsilon(1e-6));
      CHECK(log.z_loss().item<double>() == Approx(std::pow(std::log(static_cast<double>(E)), 2)).epsilon(1e-6));
    }
    {  // every token gives all its probability to experts 0 .. k-1, and chooses them
      moe::RouterLog log(shape(E, k));
      auto probs = torch::zeros({N, E});
      probs.slice(1, 0, k).fill_(1.0 / static_cast<double>(k));
      const auto chosen = torch::arange(k).expand({N, k});
      log.add(0, torch::randn({N, E}), probs, chosen);
      CHECK(log.aux_loss().item<double>() == Approx(static_cast<double>(E)).epsilon(1e-6));
    }
  }
  // Layers count together, as transformers concatenates them: one balanced layer and one
  // collapsed layer (top-1 onto expert 0, E = 2) give f = (3/4, 1/4), P = (3/4, 1/4): 2 · 10/16.
  moe::RouterLog log(shape(2, 1));
  const auto uniform = torch::full({2, 2}, 0.5), onto0 = torch::tensor({1.0f, 0.0f}).expand({2, 2});
  log.add(0, torch::zeros({2, 2}), uniform, torch::tensor({0L, 1L}).view({2, 1}));
  log.add(1, torch::zeros({2, 2}), onto0, torch::zeros({2, 1}, torch::kLong));
  CHECK(log.aux_loss().item<double>() == Approx(2.0 * (0.75 * 0.75 + 0.25 * 0.25)).epsilon(1e-6));
}

TEST_CASE("moe: the MoE MLP computes, token by token, the weighted sum of its chosen experts and the gated shared one",
          "[moe]") {
  torch::manual_seed(3);
  const std::int64_t C = 16;
  for (const auto& [norm, capacity] : {std::pair{true, 0.0}, std::pair{false, 0.0}, std::pair{true, 0.5}}) {
    CAPTURE(norm, capacity);
    auto s = shape(5, 2);
    s.norm_topk_prob = norm, s.shared_ffn_hidden = 12, s.z_loss_coeff = 0.1, s.capacity_factor = capacity;
    moe::RouterLog log(s);
    const auto expert = [C](std::int64_t width) { return std::make_shared<LlamaMlp>(C, width, TpRegion{}); };
    moe::MoeMlp mlp(C, s, expert, &log);
    const auto x = torch::randn({3, 7, C});
    const auto y = mlp.forward(x);
    REQUIRE(y.sizes() == x.sizes());
    auto params = mlp.named_parameters();
    auto gate = params["gate.weight"], shared_gate = params["shared_expert_gate.weight"];
    auto expert_of = [&](const std::string& prefix, const torch::Tensor& row) {  // the SwiGLU by its definition
      auto w = [&](const char* p) { return params[prefix + p + ".weight"]; };
      return torch::matmul(torch::silu(torch::matmul(w("gate_proj"), row)) * torch::matmul(w("up_proj"), row), w("down_proj").t());
    };
    torch::NoGradGuard no_grad;
    const auto rows = x.reshape({-1, C}), out = y.reshape({-1, C});
    // With capacity: the slots the rule keeps (its own test above), of the whole micro-batch.
    const auto [top, top_experts] = torch::matmul(rows, gate.t()).softmax(-1).topk(2, -1);
    const auto kept = torch::zeros({rows.size(0), 5}, torch::kBool)  // (N, E): token n's slot of expert e kept
                          .scatter(1, top_experts, moe::drop_over_capacity(top_experts, norm ? top / top.sum(-1, true) : top,
                                                                           5, capacity).lt(5));
    if (capacity > 0) REQUIRE(kept.sum().item<std::int64_t>() < top_experts.numel());  // some slot is dropped
    std::int64_t dropped = 0;
    for (std::int64_t n = 0; n < rows.size(0); ++n) {
      const auto row = rows[n];
      const auto probs = torch::matmul(gate, row).softmax(0);
      const auto [p, e] = probs.topk(2);
      auto want = torch::zeros({C});
      for (int j = 0; j < 2; ++j)
        if (capacity == 0 || kept[n][e[j]].item<bool>())
          want += (norm ? p[j] / p.sum() : p[j]) * expert_of("experts." + std::to_string(e[j].item<long>()) + ".", row);
        else ++dropped;
      want += torch::sigmoid(torch::matmul(shared_gate, row)) * expert_of("shared_expert.", row);
      CHECK(torch::allclose(out[n], want, 1e-5, 1e-6));
    }
    const auto load = log.take_load();  // the router's choices per expert, then the dropped slots
    REQUIRE(load.size() == 1);
    CHECK(load[0].second.narrow(0, 0, 5).sum().item<double>() == static_cast<double>(top_experts.numel()));
    CHECK(load[0].second[5].item<double>() == static_cast<double>(dropped));
  }
}

TEST_CASE("moe: capacity keeps each expert's largest-weight slots, ties to the earlier token, and drops the rest",
          "[moe]") {
  // 4 tokens, k = 1, 2 experts: capacity ⌈1.0 · 4 / 2⌉ = 2. Expert 0 is chosen by tokens 0, 1, 3.
  const auto chosen = torch::tensor({0L, 0L, 1L, 0L}).view({4, 1});
  const auto weights = torch::tensor({0.6f, 0.9f, 0.5f, 0.7f}).view({4, 1});
  CHECK(torch::equal(moe::drop_over_capacity(chosen, weights, 2, 1.0), torch::tensor({2L, 0L, 1L, 0L}).view({4, 1})));
  const auto tied = torch::full({4, 1}, 0.5f);  // equal weights: the earlier tokens are kept
  CHECK(torch::equal(moe::drop_over_capacity(chosen, tied, 2, 1.0), torch::tensor({0L, 0L, 1L, 2L}).view({4, 1})));
  CHECK(torch::equal(moe::drop_over_capacity(chosen, weights, 2, 1.5), chosen));  // capacity 3: nothing dropped
  // k = 2 of 3 experts, capacity ⌈0.5 · 6 / 3⌉ = 1: per expert, the slot of largest weight.
  const auto two = torch::tensor({0L, 1L, 0L, 2L, 1L, 2L}).view({3, 2});
  const auto w2 = torch::tensor({0.3f, 0.7f, 0.8f, 0.2f, 0.4f, 0.6f}).view({3, 2});
  CHECK(torch::equal(moe::drop_over_capacity(two, w2, 3, 0.5), torch::tensor({3L, 1L, 0L, 3L, 3L, 2L}).view({3, 2})));
}

TEST_CASE("moe: every expert and the router get a gradient, the router from the balancing losses alone too", "[moe]") {
  torch::manual_seed(5);
  auto s = shape(8, 1);
  moe::RouterLog log(s);
  moe::MoeMlp mlp(8, s, [](std::int64_t width) { return std::make_shared<LlamaMlp>(8, width, TpRegion{}); }, &log);
  const auto x = torch::randn({1, 2, 8});  // 2 tokens, top-1: at least 6 of the 8 experts get none
  mlp.forward(x).sum().backward();
  for (const auto& p : mlp.named_parameters()) {
    CAPTURE(p.key());
    CHECK(p.value().grad().defined());  // the reducer's hooks wait for every parameter's gradient
  }
  mlp.zero_grad();
  log.start({});  // a new micro-batch
  (void)mlp.forward(x);
  log.loss().backward();
  CHECK(mlp.named_parameters()["gate.weight"].grad().abs().sum().item<double>() > 0.0);
}

TEST_CASE("moe: the plan counts what the module holds, and the FLOPs count the active parameters", "[moe]") {
  // 3 layers, MoE in layers 1 (every:2): 4 experts of width 32, top-2, a shared expert of 48.
  const Config c = parse_config("", "test", {"--model.type=llama", "--model.n_layer=3", "--model.n_head=4",
                                             "--model.n_embd=64", "--model.block_size=32", "--model.multiple_of=32",
                                             "--moe.experts=4", "--moe.layers=every:2", "--moe.ffn_hidden=32",
                                             "--moe.shared_ffn_hidden=48"});
  const DataShape data{100};
  const auto model = make_model(c, data);
  const auto plan = plan_model(c, data, {});
  CHECK(plan->parameters() == count_parameters(*model));
  const std::int64_t attention = 4 * 64 * 64 + 2 * 64, dense = 3 * 192 * 64;
  const std::int64_t routed = 4 * 64, experts = 4 * 3 * 32 * 64, shared = 3 * 48 * 64 + 64;
  CHECK(count_parameters(*model) == 3 * attention + 2 * dense + routed + experts + shared + 64 + 2 * 100 * 64);
  const double active = 3.0 * attention + 2.0 * dense + routed + 2.0 * 3 * 32 * 64 + shared + 64 + 100 * 64;
  CHECK(plan->flops_per_item() == Approx(6 * active + 12.0 * 3 * 64 * 32));
}

TEST_CASE("moe: the cost accounting counts each pipeline stage's experts, and all of them in all", "[moe]") {
  // 4 layers, MoE in 0 and 3; two stages of two layers, and interleaved: four chunks of one.
  const Config c = parse_config("", "test", {"--model.type=llama", "--model.n_layer=4", "--model.n_head=4",
                                             "--model.n_embd=32", "--model.multiple_of=16", "--moe.experts=4",
                                             "--moe.layers=0,3", "--moe.ffn_hidden=16"});
  const DataShape data{64};
  const auto whole = make_model(c, data);
  const double all = static_cast<double>(count_parameters(*whole));
  const auto experts_in = [](const Model& m) {
    double n = 0;
    for (const auto& p : m.named_parameters(true)) n += m.shard(p.key()).expert ? static_cast<double>(p.value().numel()) : 0;
    return n;
  };
  for (const int chunks : {1, 2}) {
    CAPTURE(chunks);
    double held = 0;
    for (int stage = 0; stage < 2; ++stage) {
      const ModelLayout layout = stage_layout(std::vector<int>(static_cast<std::size_t>(2 * chunks), 2 / chunks), stage,
                                              chunks, nullptr, 1);
      const MoeCosts one = moe_costs(c, GridShape{2, 1, 2, 1}, layout, all, 1, 4);
      const double built = experts_in(*make_model(c, data, layout));
      CHECK(one.expert_params == built);
      CHECK(moe_costs(c, GridShape{2, 1, 2, 2}, layout, all, 1, 4).expert_params == built / 2);  // E / ep each
      CHECK(moe_costs(c, GridShape{2, 2, 2, 2}, layout, all, 1, 4).expert_params == built / 4);  // and 1/tp of each
      CHECK(one.total_params == all);
      held += built;
    }
    CHECK(held == experts_in(*whole));
  }
}

TEST_CASE("moe: keys that cannot run are refused by name, every problem at once", "[moe]") {
  const auto msg = test::config_problems({"--model.type=llama", "--model.n_layer=2", "--moe.experts=4", "--moe.top_k=5",
                             "--moe.layers=0,2", "--optim.type=onebit_adam", "--train.recompute=full",
                             "--moe.router=balanced", "--moe.expert_bias_rate=0.001"});
  CHECK_THAT(msg, Catch::StartsWith("5 problem(s)"));
  CHECK_THAT(msg, Catch::Contains("moe.expert_bias_rate = 0.001 with moe.router = balanced"));
  CHECK_THAT(msg, Catch::Contains("moe.top_k = 5 is more than moe.experts = 4"));
  CHECK_THAT(msg, Catch::Contains("moe.layers names layer 2, but model.n_layer = 2"));
  CHECK_THAT(msg, Catch::Contains("moe.experts = 4 with optim.type = onebit_adam"));
  CHECK_THAT(msg, Catch::Contains("moe.experts = 4 with train.recompute = full"));
  CHECK_THAT(test::config_problems({"--moe.experts=8"}), Catch::Contains("moe.experts = 8 makes a llama's MLPs mixtures of "
                                                            "experts, but model.type = gpt"));
  CHECK_THAT(test::config_problems({"--model.type=llama", "--model.n_layer=2", "--moe.experts=2", "--moe.layers=every:3"}),
             Catch::Contains("moe.layers = every:3 leaves no MoE layer"));
  CHECK_THAT(test::config_problems({"--moe.layers=every:0"}), Catch::Contains("moe.layers") && Catch::Contains("every:N"));
  CHECK_THAT(test::config_problems({"--moe.layers=1,x"}), Catch::Contains("'x' is not a layer index"));
  const Config c = parse_config("", "test", {"--model.type=llama", "--moe.experts=4", "--moe.layers=1,3"});
  CHECK(parse_config(config_text(c), "echo", {}).moe.list == std::vector<int>({1, 3}));
  CHECK(model_layout_problems(c, 2, 1).empty());  // expert tensor parallelism
  // 32 heads, SwiGLU width 768: only the experts' widths keep tp 16 and 8 from running.
  const Config odd = parse_config("", "test", {"--model.type=llama", "--model.n_embd=256", "--model.n_head=32",
                                               "--moe.experts=4", "--moe.ffn_hidden=24", "--moe.shared_ffn_hidden=20"});
  CHECK(model_layout_problems(odd, 16, 1) ==
        std::vector<std::string>{"moe.ffn_hidden = 24 is not divisible by grid.tp = 16; expert tensor parallelism "
                                 "splits it (valid: grid.tp dividing it)",
                                 "moe.shared_ffn_hidden = 20 is not divisible by grid.tp = 16; expert tensor "
                                 "parallelism splits it (valid: grid.tp dividing it)"});
  CHECK(model_layout_problems(odd, 8, 1).size() == 1);  // 24 divides, 20 does not
  CHECK(model_layout_problems(odd, 4, 1).empty());
  CHECK(model_layout_problems(c, 1, 2).empty());  // MoE layers on any pipeline stage
  Config sp = c;
  sp.grid.sequence_parallel = true;
  CHECK_THAT(model_layout_problems(sp, 2, 1).at(0), Catch::Contains("grid.tp = 2 and grid.sequence_parallel = true"));
}

TEST_CASE("moe: expert-parallel layouts that cannot run are refused by name, every problem at once", "[moe]") {
  const Config c = parse_config("", "test", {"--model.type=llama", "--moe.experts=6", "--optim.zero_stage=3",
                                             "--train.global_batch=64"});
  const auto problems = layout_problems(c, GridShape{4, 1, 1, 4});
  REQUIRE(problems.size() == 1);  // ZeRO 3 shards the experts over expert dp
  CHECK_THAT(problems[0], Catch::Contains("moe.experts = 6 is not divisible by grid.ep = 4"));
  CHECK_THAT(layout_problems(c, GridShape{6, 1, 1, 4}).front(), Catch::Contains("grid.ep = 4 does not divide grid.dp = 6"));
  CHECK(layout_problems(parse_config("", "test", {"--model.type=llama", "--moe.experts=8", "--train.global_batch=64"}),
                        GridShape{4, 1, 1, 4}).empty());
  const Config dense = parse_config("", "test", {"--model.type=llama"});
  CHECK_THAT(layout_problems(dense, GridShape{2, 1, 1, 2}).front(),
             Catch::Contains("grid.ep = 2 splits the experts of MoE layers, but moe.experts = 0"));
}


TEST_CASE("moe: training's loss adds the balancing losses, validation's is the cross-entropy alone", "[moe]") {
  const Config c = parse_config("", "test", {"--model.type=llama", "--model.n_layer=2", "--model.n_head=2",
                                             "--model.n_embd=16", "--model.block_size=8", "--moe.experts=4",
                                             "--moe.ffn_hidden=8", "--moe.aux_loss_coeff=0.5", "--moe.z_loss_coeff=0.1"});
  const DataShape data{50};
  const auto model = make_model(c, data);
  model->initialize(3);
  const auto rows = torch::randint(50, {2, 9}, torch::kLong);
  const auto [idx, targets] = model->split(rows);
  const auto hidden = model->stage_forward(idx, 0, idx);
  const double items = model->items(targets);
  const auto& lm = dynamic_cast<const LanguageModel&>(*model);
  const double balancing = lm.routers().loss().item<double>();
  REQUIRE(balancing > 0.0);  // 0.5 · aux + 0.1 · z: the two losses below must differ by it
  const double trained = model->head_loss_sum(hidden, targets).item<double>();
  const double validated = model->head_sums(hidden, targets)[0].item<double>();
  CHECK(validated == Approx(model->loss(idx, targets).item<double>() * items).epsilon(1e-6));
  CHECK(trained - validated == Approx(balancing * items).epsilon(1e-5));
}

TEST_CASE("moe: a llama with forced balanced routing sends every expert the same slots in every layer", "[moe]") {
  const Config c = parse_config("", "test", {"--model.type=llama", "--model.n_layer=2", "--model.n_head=2",
                                             "--model.n_embd=16", "--model.block_size=8", "--moe.experts=4",
                                             "--moe.top_k=2", "--moe.ffn_hidden=8", "--moe.router=balanced"});
  const auto model = make_model(c, DataShape{50});
  model->initialize(3);
  const auto [idx, targets] = model->split(torch::randint(50, {3, 9}, at::detail::createCPUGenerator(4)));
  model->stage_forward(idx, 0, idx);
  const auto& lm = dynamic_cast<const LanguageModel&>(*model);
  // RouterLog's running counts C (E) over both layers: 2 layers × 3 · 8 tokens × k 2 / E 4 = 24 each.
  CHECK(torch::equal(lm.routers().sums().narrow(0, 0, 4), torch::full({4}, 24.0f)));
  // f_e = k/E for every e, so E · Σ_e f_e P_e = k · Σ_e P_e = k whatever the router's P.
  CHECK(lm.routers().aux_loss().item<double>() == Approx(2.0).epsilon(1e-6));
}
