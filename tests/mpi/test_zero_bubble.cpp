// Run under mpiexec -n 2 ([np2]) and -n 4 ([np4]): train.schedule = zb-h1 (parallel/pipeline.hpp,
// precision/weight_grad_store.hpp) computes what 1f1b computes on the same grid: per step the
// same loss and gradient norm within 1e-6 (only the order in which the micro-batches' weight
// gradients are summed changes) and the same weights, at pp 2 and pp 4, with tp and sequence
// parallelism, ZeRO 1 and 2, full recomputation, context parallelism, tied embeddings, and a
// mixture of experts over ep.
#include <catch2/catch.hpp>

#include "../support/training.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

struct Layout {
  int dp, tp, pp, zero = 0;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  int cp = 1;
};

// c trained with 1f1b and with zb-h1 on the world: the same run, and the same weights on every rank.
void check_zb_h1(Config c) {
  c.train.schedule = PipelineSchedule::OneFOneB;
  QuietTrainer one_f_one_b(c);
  const RunResult want = one_f_one_b.run();
  c.train.schedule = PipelineSchedule::ZbH1;
  QuietTrainer zb(c);
  check_same_run(zb.run(), want, 1e-6);
  CHECK(rel_diff(zb.model(), one_f_one_b.model()) <= 1e-6);
}

void check_layouts(const std::string& name, const std::vector<Layout>& layouts) {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("zero-bubble-" + name + "-" + family);
  for (const Layout& l : layouts) {
    CAPTURE(l.dp, l.tp, l.pp, l.zero, l.recompute, l.sequence_parallel, l.cp);
    // 4 layers (one per stage at pp 4), 8 micro-batches of 2 per dp rank: every stage splits
    // some backwards (its first pp rank's ones, the last) and runs deferred Ws in the cooldown.
    Config base = tiny(dir, 4, 16 * l.dp);
    base.model.n_layer = 4;
    base.model.n_head = 4;  // a llama's 2 key/value heads split over tp 2
    Config c = as_family(base, family);
    c.grid.dp = l.dp, c.grid.tp = l.tp, c.grid.pp = l.pp, c.grid.cp = l.cp;
    c.grid.sequence_parallel = l.sequence_parallel;
    c.optim.zero_stage = l.zero;
    c.train.recompute = l.recompute;
    c.optim.eps = 1e-6;  // Adam's step near zero gradients: see test_3d.cpp's model_3d
    check_zb_h1(c);
  }
}

}  // namespace

TEST_CASE("zb-h1 computes what 1f1b computes at pp 2", "[np2]") { check_layouts("pp2", {{1, 1, 2}}); }

TEST_CASE("zb-h1 computes what 1f1b computes at pp 4, and at pp 2 with tp and sequence parallelism, ZeRO 1 and 2, "
          "full recomputation, and context parallelism", "[np4]") {
  check_layouts("pp4", {{1, 1, 4}, {1, 2, 2, 0, Recompute::None, true}, {2, 1, 2, 1}, {2, 1, 2, 2},
                        {2, 1, 2, 0, Recompute::Full}, {1, 1, 2, 0, Recompute::None, false, 2}});
}

TEST_CASE("zb-h1 computes what 1f1b computes for a mixture of experts at (dp 2, ep 2, pp 2)", "[np4]") {
  const auto dir = shared_dir("zero-bubble-moe");
  Config c = moe_llama(dir, 4, 2);
  c.model.n_layer = 4;
  c.grid.ep = 2;
  c.grid.pp = 2;
  c.train.global_batch = 32;  // 8 micro-batches per dp rank
  check_zb_h1(c);
}

TEST_CASE("zb-h1 with ZeRO 3 over dp is refused by name", "[np2]") {
  Config c = tiny(shared_dir("zero-bubble-zero3"), 1, 8);
  c.grid.dp = 2;
  c.optim.zero_stage = 3;
  c.train.schedule = PipelineSchedule::ZbH1;
  CHECK_THROWS_WITH(QuietTrainer(c), Catch::Contains("train.schedule = zb-h1 with optim.zero_stage = 3") &&
                                         Catch::Contains("valid: optim.zero_stage <= 2, or train.schedule = 1f1b"));
}
