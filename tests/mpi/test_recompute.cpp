// train.recompute = selective and full over the layouts: the same training as none (losses,
// gradient norms with clipping active, final weights, ≤ 1e-6 relative) at (dp, tp, pp) = (2, 2, 2)
// at ZeRO stages 0 and 3 (a unit gathered again for its recompute), and at ZeRO 3 over dp, for
// the gpt and the llama. (One rank, fp32 and bf16: tests/unit/test_recompute.cpp.)
// Run under mpiexec -n 2, -n 4 and -n 8.
#include <catch2/catch.hpp>

#include "../support/training.hpp"
#include "gridtrain/parallel/sharded_parameters.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// This rank's parameters after training c (made whole at ZeRO stage 3), with its run.
std::pair<RunResult, std::vector<torch::Tensor>> train(const Config& c) {
  QuietTrainer t(c);
  auto r = t.run();
  WholeParameters whole(t.parameters());
  std::vector<torch::Tensor> w;
  for (const auto& p : t.model().parameters()) w.push_back(p.detach().clone());
  return {r, w};
}

void check_recompute_trains_as_none(Config c) {
  c.optim.clip_grad = 0.1;  // the global norm must be right for the weights to agree
  c.train.recompute = Recompute::None;
  const auto [want, want_w] = train(c);
  for (auto r : {Recompute::Selective, Recompute::Full}) {
    CAPTURE(name_of(r));
    c.train.recompute = r;
    const auto [got, got_w] = train(c);
    check_same_run(got, want);
    REQUIRE(got_w.size() == want_w.size());
    for (std::size_t i = 0; i < want_w.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::allclose(got_w[i], want_w[i], 1e-6, 1e-7));
    }
  }
}

}  // namespace

TEST_CASE("recompute at (2, 2, 2) trains as none, at ZeRO stages 0 and 3", "[np8]") {
  for (const std::string family : {"gpt", "llama"}) {
    CAPTURE(family);
    Config c = tiny(shared_dir("recompute-3d-" + family), 6, 8);
    c.model.n_layer = 4;
    c.model.n_head = 8;
    c.model.n_embd = 32;
    c = as_family(c, family);
    c.grid.dp = c.grid.tp = c.grid.pp = 2;
    for (int stage : {0, 3}) {
      CAPTURE(stage);
      c.optim.zero_stage = stage;
      check_recompute_trains_as_none(c);
    }
  }
}

TEST_CASE("recompute at ZeRO stage 3 over every rank as dp trains as none", "[np2][np4]") {
  for (const std::string family : {"gpt", "llama"}) {
    CAPTURE(family);
    Config c = as_family(tiny(shared_dir("recompute-zero3-" + family), 8, 4 * world_size()), family);
    c.optim.zero_stage = 3;
    check_recompute_trains_as_none(c);
  }
}
