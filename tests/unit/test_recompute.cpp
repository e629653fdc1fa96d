// train.recompute on one rank: selective and full recomputation give the gradients of none (fp32
// and bf16 autocast, gpt and llama), the autograd graph really keeps only what the mode keeps
// (one recompute node per layer, none of a recomputed block's own nodes), the accountant's
// activation bytes follow Korthikanti et al. 2022 Table 2 per mode, and the CNN is refused by name.
// (The layouts and ZeRO stage 3: tests/mpi/test_recompute.cpp.)
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include <set>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/precision/autocast.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;

namespace {

Config deck(const std::string& type, Recompute r, const std::string& attention = "sdpa") {
  Config c = parse_config("", "test",
                          {"--model.type=" + type, "--model.n_layer=3", "--model.n_head=4", "--model.n_embd=32",
                           "--model.block_size=16", "--model.attention=" + attention});
  c.train.recompute = r;
  return c;
}

struct Pass {
  double loss;
  std::vector<torch::Tensor> grads;
  std::shared_ptr<torch::autograd::Node> graph;  // the loss's, kept only when asked
};

// One forward and backward of c's model (initialized from seed 7) on fixed ids; with keep_graph
// the graph is kept (and not run) so that its nodes can be counted.
Pass pass(const Config& c, PrecisionType precision, bool keep_graph = false) {
  const DataShape data{50};
  auto model = make_model(c, data);
  model->initialize(7);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto idx = torch::randint(50, {2, 16}, gen, torch::kLong), targets = torch::randint(50, {2, 16}, gen, torch::kLong);
  torch::Tensor loss;
  {
    AutocastGuard autocast(precision, torch::kCPU);
    loss = model->loss(idx, targets);
  }
  Pass p{loss.item<double>(), {}, keep_graph ? loss.grad_fn() : nullptr};
  if (keep_graph) return p;
  loss.backward();
  for (const auto& w : model->named_parameters()) {
    INFO(w.key());
    REQUIRE(w.value().grad().defined());
    p.grads.push_back(w.value().grad().clone());
  }
  return p;
}

// {nodes reachable from root, how many of them are recompute nodes}.
std::pair<std::size_t, std::size_t> count_nodes(const std::shared_ptr<torch::autograd::Node>& root) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{root.get()};
  std::size_t recompute = 0;
  while (!todo.empty()) {
    auto* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    if (n->name().find("Recompute") != std::string::npos) ++recompute;
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return {seen.size(), recompute};
}

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

}  // namespace

TEST_CASE("recompute: selective and full give the gradients of none (fp32, bf16 autocast)", "[recompute]") {
  for (const char* type : {"gpt", "llama"}) {
    for (const char* attention : {"sdpa", "math"}) {
      for (auto precision : {PrecisionType::Fp32, PrecisionType::Bf16}) {
        CAPTURE(type, attention, name_of(precision));
        const auto want = pass(deck(type, Recompute::None, attention), precision);
        for (auto r : {Recompute::Selective, Recompute::Full}) {
          CAPTURE(name_of(r));
          const auto got = pass(deck(type, r, attention), precision);
          CHECK(got.loss == want.loss);
          REQUIRE(got.grads.size() == want.grads.size());
          for (std::size_t i = 0; i < want.grads.size(); ++i) {
            CAPTURE(i);
            CHECK(rel_diff(got.grads[i], want.grads[i]) <= 1e-6);
          }
        }
      }
    }
  }
}

TEST_CASE("recompute: the graph keeps one recompute node per layer and none of a fully recomputed block's nodes",
          "[recompute]") {
  for (const char* type : {"gpt", "llama"}) {
    CAPTURE(type);
    // The written-out attention: its core is several nodes (sdpa's is one).
    auto graph = [&](Recompute r) { return count_nodes(pass(deck(type, r, "math"), PrecisionType::Fp32, true).graph); };
    const auto none = graph(Recompute::None), selective = graph(Recompute::Selective), full = graph(Recompute::Full);
    CHECK(none.second == 0);
    CHECK(selective.second == 3);
    CHECK(full.second == 3);
    // Selective trades the attention core's nodes (at least the attention's own) for one per layer;
    // full leaves of each block one node: what remains is the embedding, the head, the loss and
    // the parameters' accumulators, the same with 3 layers as with one.
    CHECK(selective.first < none.first);
    CHECK(full.first < selective.first);
    Config one = deck(type, Recompute::Full, "math");
    one.model.n_layer = 1;
    const auto one_layer = count_nodes(pass(one, PrecisionType::Fp32, true).graph);
    const std::size_t per_block_params = type == std::string("gpt") ? 12 : 9;  // their accumulators
    CHECK(full.first - one_layer.first == 2 * (1 + per_block_params));
  }
}

TEST_CASE("recompute: the accountant keeps per layer what Korthikanti et al. 2022 Table 2 keeps", "[recompute]") {
  const DataShape data{50};
  for (const char* type : {"gpt", "llama"}) {
    for (const char* attention : {"sdpa", "math"}) {
      CAPTURE(type, attention);
      auto bytes = [&](Recompute r, int in_flight) {
        return plan_model(deck(type, r, attention), data, {})->activation_bytes(4, 2, in_flight);
      };
      const double input = 4.0 * 16 * 32 * 2, head = 8.0 * 4 * 16 * 50;  // (B, T, C) at 2 bytes; fp32 logits
      const double none1 = bytes(Recompute::None, 1), none2 = bytes(Recompute::None, 2);
      const double sel1 = bytes(Recompute::Selective, 1), sel2 = bytes(Recompute::Selective, 2);
      const double layer = (none2 - none1 - head) / 3;  // one layer's, kept per micro-batch
      // What selective does not keep per layer: the scores, one (B, H, T, T) tensor (none with sdpa).
      const double scores = (none2 - none1 - (sel2 - sel1)) / 3;
      CHECK(scores == Approx(attention == std::string("sdpa") ? 0.0 : 4.0 * 4 * 16 * 16 * 2).margin(1e-9));
      // At one layer's backward: the softmax's two score-sized gradients; selective also rebuilds
      // that layer's scores, full its whole activations.
      CHECK(none1 == Approx(3 * layer + head + 2 * scores));
      CHECK(sel1 == Approx(3 * (layer - scores) + head + 3 * scores));
      CHECK(bytes(Recompute::Full, 2) == Approx(2 * (3 * input + head) + layer + 2 * scores));
      CHECK(bytes(Recompute::Full, 1) < 0.5 * none1);
    }
  }
}

TEST_CASE("recompute: the cnn has no blocks to recompute and says so", "[recompute]") {
  try {
    parse_config("", "test", {"--model.type=cnn", "--train.recompute=full"});
    FAIL("train.recompute = full was accepted for model.type = cnn");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("train.recompute = full recomputes transformer blocks, but model.type = cnn"));
  }
}
