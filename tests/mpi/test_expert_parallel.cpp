// Run under mpiexec -n 4 ([np4]) and -n 8 ([np8]): expert parallelism (parallel/expert_parallel.hpp). The token dispatch
// alone, at ep 1, 2 and 4 (and with slots dropped by capacity): every row reaches the expert
// that was chosen for it, and permute → unpermute with weights 1/k gives back the input and its
// gradient. Then the MoE llama at (dp 4, ep 2), (dp 4, ep 4), (dp 2, ep 2, tp 2),
// (dp 2, ep 2, pp 2) (a stage without MoE layers, the interleaved schedule) and with ZeRO 1, 2 and 3
// over the expert-data-parallel ranks trains as one rank does, also with a capacity factor
// (dropping the slots one rank drops, with its router statistics), with forced balanced routing, and with the sigmoid router
// and its expert bias (moving it as one rank does); a checkpoint written at ep 4 resumes at ep 2
// and that one's loads on one rank; and a resume at ep 2 is bit-exact, the bias too. On 8 ranks the
// axes together: (dp 4, ep 2, tp 2), (dp 4, ep 4, pp 2) and (dp 2, ep 2, tp 2, pp 2), learned and
// forced balanced routing, ZeRO 1 and 3, a stage without MoE layers.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "../support/training.hpp"
#include "gridtrain/parallel/expert_parallel.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// Rank r's tokens: 5 + 3r rows of C = 6, each routed to k = 2 distinct experts of 8, ascending.
struct Routed {
  torch::Tensor x, chosen;
};

Routed routed_tokens(int rank) {
  const auto gen = at::detail::createCPUGenerator(100 + rank);
  const std::int64_t n = 5 + 3 * rank;
  auto x = torch::randn({n, 6}, gen, torch::kFloat);
  const auto top = std::get<1>(torch::rand({n, 8}, gen, torch::kFloat).topk(2, -1));
  const auto chosen = std::get<0>(top.sort(-1));
  return {x, chosen};
}

// metrics.jsonl's figure `name` of each thermo line in run directory `dir`.
std::vector<double> metric(const std::string& dir, const std::string& name) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<double> out;
  const std::string key = "\"" + name + "\":";
  for (std::string line; std::getline(in, line);)
    if (const auto at = line.find(key); at != std::string::npos) out.push_back(std::stod(line.substr(at + key.size())));
  return out;
}

}  // namespace

TEST_CASE("token dispatch: rows reach their experts, and permute then unpermute restores x and its gradient",
          "[np4]") {
  const int rank = world_rank();
  for (const auto& [ep, drops] : {std::pair{1, false}, std::pair{2, false}, std::pair{4, false}, std::pair{1, true},
                                 std::pair{4, true}}) {
    CAPTURE(ep, drops);
    Axis world("world", MPI_COMM_WORLD);
    auto axis = world.split(rank / ep, rank % ep, "ep");
    const EpRegion region{axis.get()};
    const std::int64_t E = 8, local = region.local(E), first = region.first(E);
    auto [x, chosen] = routed_tokens(rank);
    // Capacity drops: every third token's second slot goes to expert E, which none computes.
    if (drops) chosen.index_put_({torch::arange(0, chosen.size(0), 3), 1}, E);
    const auto kept = chosen.lt(E).to(torch::kFloat);  // (N, k)
    x.requires_grad_(true);
    const TokenDispatch dispatch(chosen, E, region);
    const auto rows = dispatch.dispatch(x);
    REQUIRE(static_cast<std::int64_t>(dispatch.rows().size()) == local);
    // Expert j scales its rows by (its global index + 1): the combine with weights 1/k then gives
    // each token x · mean over its experts of (e + 1), which only a correct routing produces.
    std::vector<torch::Tensor> ys;
    std::int64_t at = 0;
    for (std::int64_t j = 0; j < local; ++j) {
      ys.push_back(rows.narrow(0, at, dispatch.rows()[j]) * static_cast<double>(first + j + 1));
      at += dispatch.rows()[j];
    }
    CHECK(at == rows.size(0));
    const auto half = torch::full(chosen.sizes(), 0.5);
    const auto scaled = dispatch.combine(torch::cat(ys), half);
    const auto want = x.detach() * ((chosen.to(torch::kFloat) + 1.0) * kept).sum(1, /*keepdim=*/true) / 2;
    CHECK(torch::allclose(scaled, want, 1e-6, 1e-6));
    // Identity experts: x · (½ + ½) = x exactly (x · ½ for a token with a dropped slot), and the
    // gradient g comes back as g (g · ½).
    const auto restored = dispatch.combine(rows, half);
    const auto share = kept.sum(1, /*keepdim=*/true) / 2;
    CHECK(torch::equal(restored, x.detach() * share));
    const auto g = torch::randn(x.sizes(), at::detail::createCPUGenerator(7 + rank), torch::kFloat);
    restored.backward(g);
    CHECK(torch::equal(x.grad(), g * share));
  }
}

TEST_CASE("expert parallelism: (dp 4, ep 2), (dp 4, ep 4), (dp 2, ep 2, tp 2) and ZeRO 1-3 over expert dp train "
          "as one rank", "[np4]") {
  const auto dir = shared_dir("moe-ep");
  QuietTrainer one(moe_llama(dir, 5, 1), MPI_COMM_SELF);
  const RunResult want = one.run();
  struct Layout {
    int dp, ep, tp, zero;
  };
  for (const Layout l : {Layout{4, 2, 1, 0}, Layout{4, 4, 1, 0}, Layout{2, 2, 2, 0}, Layout{4, 2, 1, 1},
                         Layout{4, 4, 1, 2}, Layout{4, 2, 1, 3}, Layout{2, 2, 2, 3}}) {
    CAPTURE(l.dp, l.ep, l.tp, l.zero);
    Config c = moe_llama(dir, 5, l.dp);
    c.grid.ep = l.ep;
    c.grid.tp = l.tp;  // the router replicated over tp, every expert split over it
    c.optim.zero_stage = l.zero;
    c.checkpoint.dir = dir + "/ckpt-ep" + std::to_string(l.ep) + "-tp" + std::to_string(l.tp) + "-zero" +
                       std::to_string(l.zero);
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
    // Every ep rank's experts reach the file, under their global indices.
    QuietTrainer loaded(resuming(moe_llama(dir, 5, 1), c.checkpoint.dir), MPI_COMM_SELF);
    CHECK(rel_diff(loaded.model(), one.model()) <= 1e-5);
  }
}

TEST_CASE("expert parallelism with forced balanced routing: (dp 4, ep 4) and (dp 2, ep 2, tp 2) train as one rank",
          "[np4]") {
  const auto dir = shared_dir("moe-ep-balanced");
  auto deck = [&](int dp) {
    Config c = moe_llama(dir, 4, dp);
    c.moe.router = MoeRouter::Balanced;
    return c;
  };
  QuietTrainer one(deck(1), MPI_COMM_SELF);
  const RunResult want = one.run();
  for (const auto& [dp, ep, tp] : {std::tuple{4, 4, 1}, std::tuple{2, 2, 2}}) {
    CAPTURE(dp, ep, tp);
    Config c = deck(dp);
    c.grid.ep = ep;
    c.grid.tp = tp;
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
  }
}

TEST_CASE("expert parallelism: a checkpoint reshards ep 4 -> ep 2 -> one rank; a resume at ep 2 is bit-exact",
          "[np4]") {
  const auto dir = shared_dir("moe-ep-reshard");
  const auto ckpt = dir + "/ckpt";
  Config first = moe_llama(dir, 3, 4);
  first.grid.ep = 4;
  first.checkpoint.dir = ckpt;
  quiet_run(first);
  Config second = resuming(moe_llama(dir, 6, 4), ckpt);
  second.grid.ep = 2;
  const RunResult resumed = quiet_run(second);
  CHECK(resumed.losses.size() == 3);  // steps 4 to 6
  QuietTrainer one(moe_llama(dir, 6, 1), MPI_COMM_SELF);
  const RunResult want = one.run();
  for (std::size_t i = 0; i < resumed.losses.size(); ++i) CHECK(rel(resumed.losses[i], want.losses[3 + i]) <= 1e-5);
  QuietTrainer loaded(resuming(moe_llama(dir, 6, 1), ckpt), MPI_COMM_SELF);
  CHECK(rel_diff(loaded.model(), one.model()) <= 1e-5);
  check_resume(dir + "/ckpt-bits", [&](int steps) {
    Config c = moe_llama(dir, steps, 4);
    c.grid.ep = 2;
    return c;
  }, 3, 6);
}

TEST_CASE("expert parallelism with pipeline stages: (dp 2, ep 2, pp 2), a stage without MoE layers and the "
          "interleaved schedule train as one rank", "[np4]") {
  const auto dir = shared_dir("moe-ep-pp");
  struct Layout {
    std::vector<int> moe_layers;  // empty: every layer
    int n_layer, virtual_stages;
  };
  for (const Layout& l : {Layout{{}, 2, 1}, Layout{{1}, 2, 1}, Layout{{0}, 2, 1}, Layout{{0, 3}, 4, 2}}) {
    CAPTURE(l.moe_layers, l.n_layer, l.virtual_stages);
    auto deck = [&](int dp) {
      Config c = moe_llama(dir, 4, dp);
      c.model.n_layer = l.n_layer;
      c.moe.list = l.moe_layers;
      return c;
    };
    QuietTrainer one(deck(1), MPI_COMM_SELF);
    const RunResult want = one.run();
    Config c = deck(2);
    c.grid.ep = 2;
    c.grid.pp = 2;
    if (l.virtual_stages > 1) {
      c.train.schedule = PipelineSchedule::Interleaved;
      c.grid.virtual_stages = l.virtual_stages;
    }
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
  }
}

TEST_CASE("expert parallelism with a capacity factor: (dp 4, ep 2), (dp 2, ep 2, pp 2) and (dp 2, ep 2, tp 2) drop "
          "the slots one rank drops, report its router statistics and train as it does", "[np4]") {
  const auto dir = shared_dir("moe-ep-capacity");
  // Capacity ⌈1.0 · 32·2 / 4⌉ = 16 of a micro-batch's 64 slots per expert: what an unbalanced
  // router sends beyond it is dropped, a count that depends on the routing.
  auto deck = [&](int dp, const std::string& out) {
    Config c = moe_llama(dir, 4, dp);
    c.moe.capacity_factor = 1.0;
    c.output.thermo = 1;
    c.output.dir = dir + "/" + out;
    return c;
  };
  // Each run directory is made by the one rank that writes in it (as the app's RunDirectory would).
  auto made = [](Config c) {
    std::filesystem::create_directories(c.output.dir);
    return c;
  };
  // Logs that print nothing but keep metrics.jsonl: each one-rank run's, and rank 0's of the grid.
  Log self(true, /*screen=*/false), grid(world_rank() == 0, /*screen=*/false);
  const std::string mine = "one-" + std::to_string(world_rank());
  Trainer one(made(deck(1, mine)), MPI_COMM_SELF, self, 1.0);
  const RunResult want = one.run();
  const auto want_dropped = metric(dir + "/" + mine, "moe_dropped");
  REQUIRE(want_dropped.size() == 4);
  CHECK(want_dropped[0] > 0);
  // RouterStats' figures (app/router_stats.hpp), which each layout sums over its ranks (the load
  // from every stage, the losses from the last) to one rank's.
  const std::vector<std::string> figures = {"moe_aux_loss", "moe_z_loss", "moe_max_load", "moe_max_load_0",
                                            "moe_max_load_1", "moe_drop_fraction"};
  for (const auto& f : figures) {
    CAPTURE(f);
    REQUIRE(metric(dir + "/" + mine, f).size() == 4);
  }
  for (const double load : metric(dir + "/" + mine, "moe_max_load")) CHECK((load >= 1 && load <= 4.0 / 2));  // at most E / k
  for (const auto& [tp, pp] : {std::pair{1, 1}, std::pair{1, 2}, std::pair{2, 1}}) {
    CAPTURE(tp, pp);
    Config c = deck(4 / pp / tp, "tp" + std::to_string(tp) + "pp" + std::to_string(pp));
    c.grid.ep = 2;
    c.grid.tp = tp;
    c.grid.pp = pp;
    if (world_rank() == 0) made(c);
    MPI_Barrier(MPI_COMM_WORLD);
    Trainer t(c, MPI_COMM_WORLD, grid, 1.0);
    check_same_run(t.run(), want, 1e-5);
    if (world_rank() != 0) continue;
    CHECK(metric(c.output.dir, "moe_dropped") == want_dropped);  // the same routing
    for (const auto& f : figures) {
      CAPTURE(f);
      const auto got = metric(c.output.dir, f), one_rank = metric(dir + "/" + mine, f);
      REQUIRE(got.size() == one_rank.size());
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(rel(got[i], one_rank[i]) <= 1e-5);
    }
  }
}

TEST_CASE("expert parallelism with the sigmoid router and expert bias: (dp 4, ep 2) and (dp 2, ep 2, pp 2) train "
          "and balance as one rank; the bias reshards and, under ZeRO 3, resumes bit-exact", "[np4]") {
  const auto dir = shared_dir("moe-ep-bias");
  auto deck = [&](int steps, int dp) {
    Config c = moe_llama(dir, steps, dp);
    c.moe.router = MoeRouter::Sigmoid;
    c.moe.expert_bias_rate = 1e-3;
    return c;
  };
  // Each expert bias of a trainer's stage, by name.
  auto biases = [](Trainer& t) {
    std::map<std::string, torch::Tensor> out;
    for (auto& [name, b] : t.model().kept_state()) out[name] = b.clone();
    return out;
  };
  QuietTrainer one(deck(5, 1), MPI_COMM_SELF);
  const RunResult want = one.run();
  const auto want_bias = biases(one);
  REQUIRE(want_bias.size() == 2);  // both layers are MoE layers
  for (const auto& [name, b] : want_bias) {
    CAPTURE(name);
    CHECK(b.abs().max().item<double>() > 0);  // the routing was unbalanced, and the bias moved
    const auto steps = b / 1e-3;  // a sum of 5 steps of +γ, −γ or 0
    CHECK((steps - steps.round()).abs().max().item<double>() < 1e-3);
    CHECK(steps.abs().max().item<double>() <= 5 + 1e-3);
  }
  for (const int pp : {1, 2}) {
    CAPTURE(pp);
    Config c = deck(5, 4 / pp);
    c.grid.ep = 2;
    c.grid.pp = pp;
    c.checkpoint.dir = dir + "/ckpt-pp" + std::to_string(pp);
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
    const auto got = biases(t);
    CHECK(got.size() == (pp == 1 ? 2u : 1u));  // each stage holds its layer's router
    for (const auto& [name, b] : got) {
      CAPTURE(name);
      REQUIRE(want_bias.count(name) == 1);
      CHECK(torch::equal(b, want_bias.at(name)));  // the same counts, so the same ±γ steps
    }
    QuietTrainer loaded(resuming(deck(5, 1), c.checkpoint.dir), MPI_COMM_SELF);
    for (const auto& [name, b] : biases(loaded)) CHECK(torch::equal(b, want_bias.at(name)));
  }
  check_resume(dir + "/ckpt-bits", [&](int steps) {
    Config c = deck(steps, 4);
    c.grid.ep = 2;
    c.optim.zero_stage = 3;  // the experts' shards over expert dp, the dense ones' over dp
    return c;
  }, 3, 6);
}

TEST_CASE("expert parallelism on 8 ranks: (dp 4, ep 2, tp 2), (dp 4, ep 4, pp 2) and (dp 2, ep 2, tp 2, pp 2) train "
          "as one rank, learned and forced balanced routing, ZeRO 1 and 3, a stage without MoE layers", "[np8]") {
  const auto dir = shared_dir("moe-ep-np8");
  struct Layout {
    int dp, ep, tp, pp, zero;
    std::vector<int> moe_layers;  // empty: every layer; {1}: pipeline stage 0 holds no experts
  };
  for (const auto router : {MoeRouter::Softmax, MoeRouter::Balanced}) {
    for (const Layout& l : {Layout{4, 2, 2, 1, 1, {}}, Layout{4, 4, 1, 2, 3, {}}, Layout{2, 2, 2, 2, 3, {1}}}) {
      const std::string routing = name_of(router);
      CAPTURE(routing, l.dp, l.ep, l.tp, l.pp, l.zero, l.moe_layers);
      auto deck = [&](int dp) {
        Config c = moe_llama(dir, 4, dp);
        c.moe.router = router;
        c.moe.list = l.moe_layers;
        return c;
      };
      QuietTrainer one(deck(1), MPI_COMM_SELF);
      const RunResult want = one.run();
      Config c = deck(l.dp);
      c.grid.ep = l.ep;
      c.grid.tp = l.tp;
      c.grid.pp = l.pp;
      c.optim.zero_stage = l.zero;
      c.checkpoint.dir = dir + "/ckpt-" + routing + "-" + std::to_string(l.dp) + std::to_string(l.ep) +
                         std::to_string(l.tp) + std::to_string(l.pp);
      QuietTrainer t(c);
      check_same_run(t.run(), want, 1e-5);
      // Every ep rank's experts, of every stage, reach the file under their global indices.
      QuietTrainer loaded(resuming(deck(1), c.checkpoint.dir), MPI_COMM_SELF);
      CHECK(rel_diff(loaded.model(), one.model()) <= 1e-5);
    }
  }
}

TEST_CASE("context parallelism with experts: (dp 2, cp 2, ep 2), (cp 2, pp 2), (cp 2, tp 2) and the sigmoid router "
          "with expert bias at (dp 2, cp 2) train as one rank: the routers' balancing sums and loads cover whole "
          "sequences", "[np4]") {
  const auto dir = shared_dir("moe-cp");
  struct Layout {
    int dp, ep, tp, pp;
    bool bias;
  };
  for (const Layout l : {Layout{2, 2, 1, 1, false}, Layout{1, 1, 1, 2, false}, Layout{1, 1, 2, 1, false},
                         Layout{2, 1, 1, 1, true}}) {
    CAPTURE(l.dp, l.ep, l.tp, l.pp, l.bias);
    auto deck = [&](int dp) {
      Config c = moe_llama(dir, 5, dp);
      if (l.bias) c.moe.router = MoeRouter::Sigmoid, c.moe.expert_bias_rate = 1e-3;
      return c;
    };
    QuietTrainer one(deck(1), MPI_COMM_SELF);
    const RunResult want = one.run();
    Config c = deck(l.dp);
    c.grid.cp = 2, c.grid.ep = l.ep, c.grid.tp = l.tp, c.grid.pp = l.pp;
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
    if (l.pp == 1 && l.tp == 1 && l.ep == 1) CHECK(rel_diff(t.model(), one.model()) <= 1e-5);  // the whole model here
  }
}
