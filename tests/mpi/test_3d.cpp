// The full 3D grid: any (dp, tp, pp) layout of the same model on the same data computes the
// one-rank run (losses, gradient norms with clipping active, final weights), and checkpoints
// written at one layout load at another. 8 ranks, oversubscribed.
#include <catch2/catch.hpp>

#include <functional>
#include <map>

#include "../support/training.hpp"
#include "gridtrain/model/registry.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// A language model of `family` that every layout below can split: 8 heads (tp up to 8; a Llama
// has 4 key/value heads, 8 at tp = 8), 4 layers (pp up to 4); clipping is active on every step,
// so the global norm must be right for the weights to agree.
Config model_3d(const std::string& dir, int steps, int dp, int tp, int pp, const std::string& family = "gpt") {
  Config c = tiny(dir, steps, 8);
  c.model.n_layer = 4;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c.optim.clip_grad = 0.1;
  // Layouts sum each gradient in another order: it differs by a rounding δ (~1e-11 here: fp32
  // sums of terms ~1e-4). Adam's step lr·g/(|g| + ε) moves by up to lr·δ/ε for an element whose
  // gradient is near 0: ~1e-6 a step at ε = 1e-8, the weights' atol below; ~1e-8 at ε = 1e-6.
  c.optim.eps = 1e-6;
  c.grid.dp = dp, c.grid.tp = tp, c.grid.pp = pp;
  c = as_family(c, family);
  if (c.model.type == ModelType::Llama && tp > c.model.n_kv_head) c.model.n_kv_head = tp;
  return c;
}

std::map<std::string, torch::Tensor> weights(Trainer& t) {
  std::map<std::string, torch::Tensor> w;
  for (const auto& p : t.model().named_parameters(true)) w[p.key()] = p.value().detach().clone();
  return w;
}

// Every rank alone: the reference run, then the layout's checkpoint loaded onto one rank.
void check_against_one_rank(const Config& layout_cfg, const RunResult& got, const Config& one_cfg) {
  QuietTrainer one(one_cfg, MPI_COMM_SELF);
  const auto want = one.run();
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(rel(got.losses[s], want.losses[s]) <= 1e-5);
    CHECK(rel(got.grad_norms[s], want.grad_norms[s]) <= 1e-5);
  }
  // The layout's final state, gathered through its checkpoint.
  QuietTrainer loaded(resuming(one_cfg, layout_cfg.checkpoint.dir), MPI_COMM_SELF);
  const auto a = weights(loaded), b = weights(one);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, w] : b) {
    CAPTURE(name);
    CHECK(torch::allclose(a.at(name), w, 1e-5, 1e-6));
  }
}

// A layout with options: sequence parallelism, the interleaved schedule's chunks per rank
// (virtual_stages > 1: 8 layers, 16 sequences a step), ZeRO, recomputation, context parallelism.
struct LayoutCase {
  int dp, tp, pp, zero = 0;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  int virtual_stages = 1;
  int cp = 1;
  ContextExchange cp_comm = ContextExchange::Ring;
};

// Each case computes the one-rank run (losses, gradient norms, weights through its checkpoint);
// with sequence and context parallelism its residual stream holds this rank's tokens. deck: keys
// set at both.
void check_layouts(const std::string& family, const std::string& name, const std::vector<LayoutCase>& cases,
                   const std::function<void(Config&)>& deck = [](Config&) {}) {
  CAPTURE(family);
  const auto dir = shared_dir(name + "-" + family);
  for (const LayoutCase& k : cases) {
    CAPTURE(k.dp, k.tp, k.pp, k.zero, name_of(k.recompute), k.sequence_parallel, k.virtual_stages, k.cp,
            name_of(k.cp_comm));
    auto config = [&](int dp, int tp, int pp) {
      Config c = model_3d(dir, 6, dp, tp, pp, family);
      if (k.virtual_stages > 1) c.model.n_layer = 8, c.train.global_batch = 16;
      deck(c);
      return c;
    };
    Config c = config(k.dp, k.tp, k.pp);
    c.grid.sequence_parallel = k.sequence_parallel;
    c.optim.zero_stage = k.zero;
    c.train.recompute = k.recompute;
    c.grid.cp = k.cp, c.grid.cp_comm = k.cp_comm;
    if (k.virtual_stages > 1) c.train.schedule = PipelineSchedule::Interleaved, c.grid.virtual_stages = k.virtual_stages;
    c.checkpoint.dir = dir + "/ckpt-" + std::to_string(k.dp) + std::to_string(k.tp) + std::to_string(k.pp) + "-zero" +
                       std::to_string(k.zero) + "-v" + std::to_string(k.virtual_stages) + "-cp" + std::to_string(k.cp) +
                       name_of(k.cp_comm);
    QuietTrainer t(c);
    const auto got = t.run();
    const auto T = c.model.block_size;
    if ((k.sequence_parallel || k.cp > 1) && t.model().first_stage() && k.zero == 0) {
      torch::NoGradGuard no_grad;
      const auto ids = torch::zeros({2, T / k.cp}, torch::kLong);  // this cp rank's tokens
      CHECK(t.model().stage_forward(ids, 0, ids).size(1) == T / k.cp / (k.sequence_parallel ? k.tp : 1));
    }
    Config one = config(1, 1, 1);
    one.model.n_kv_head = c.model.n_kv_head;
    check_against_one_rank(c, got, one);
  }
}

}  // namespace

TEST_CASE("every (dp, tp, pp) layout computes the one-rank run", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("layouts-" + family);
  // (2,1,4) has 2 micro-batches for 4 stages: fewer micro-batches than stages.
  for (auto [dp, tp, pp] : {std::array{2, 2, 2}, {1, 2, 4}, {2, 1, 4}, {4, 2, 1}, {1, 8, 1}}) {
    CAPTURE(dp, tp, pp);
    Config c = model_3d(dir, 6, dp, tp, pp, family);
    c.checkpoint.dir = dir + "/ckpt-" + std::to_string(dp) + std::to_string(tp) + std::to_string(pp);
    QuietTrainer t(c);
    const auto got = t.run();
    // The dry run's count, made without building the model, is what this rank holds.
    const LaunchPlan plan = plan_launch(c, t.grid().shape().size());
    CHECK(plan_model(c, DataShape{256}, model_layout(plan, t.grid()))->parameters() == count_parameters(t.model()));
    Config one = model_3d(dir, 6, 1, 1, 1, family);
    one.model.n_kv_head = c.model.n_kv_head;  // the layout's model (8 key/value heads at tp = 8)
    check_against_one_rank(c, got, one);
  }
}

TEST_CASE("sequence parallel at (2, 2, 2) and (1, 8, 1), and with ZeRO 3 and full recomputation, computes the one-rank run",
          "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "sequence-parallel",
                {{2, 2, 2, 0, Recompute::None, true}, {1, 8, 1, 0, Recompute::None, true},
                 {2, 2, 2, 3, Recompute::Full, true}});
}

TEST_CASE("sequence parallel at (1, 2, 2), and at (1, 4, 1) with ZeRO 1 and selective recomputation, computes the "
          "one-rank run", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "sequence-parallel", {{1, 2, 2, 0, Recompute::None, true}, {1, 4, 1, 1, Recompute::Selective, true}});
}

TEST_CASE("interleaved 1F1B with 2 chunks per rank at (1, 2, 4) with sequence parallelism and at (2, 1, 4) with ZeRO 3 "
          "and full recomputation computes the one-rank run", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "interleaved",
                {{1, 2, 4, 0, Recompute::None, true, 2}, {2, 1, 4, 3, Recompute::Full, false, 2}});
}

TEST_CASE("interleaved 1F1B at (1, 1, 4), (2, 1, 2) with ZeRO 1, 2 and 3, and (1, 2, 2) with 3 uneven chunks per rank "
          "computes the one-rank run", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "interleaved",
                {{1, 1, 4, 0, Recompute::None, false, 2}, {2, 1, 2, 1, Recompute::None, false, 2},
                 {2, 1, 2, 2, Recompute::None, false, 2}, {2, 1, 2, 3, Recompute::None, false, 2},
                 {1, 2, 2, 0, Recompute::None, false, 3}});
}

TEST_CASE("interleaved 1F1B at (1, 1, 2) with 2 and 4 chunks per rank computes the one-rank run", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "interleaved", {{1, 1, 2, 0, Recompute::None, false, 2}, {1, 1, 2, 0, Recompute::None, false, 4}});
}

TEST_CASE("context parallelism at (dp 2, cp 2, tp 2), (cp 2, pp 2, tp 2) with sequence parallelism, (dp 2, cp 4) "
          "with ZeRO 3, with full and selective recomputation, and all-gathered keys and values, computes the one-rank "
          "run", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  using enum ContextExchange;
  check_layouts(family, "context-parallel",
                {{2, 2, 1, 0, Recompute::None, false, 1, 2},
                 {1, 2, 2, 0, Recompute::None, true, 1, 2},
                 {2, 1, 1, 3, Recompute::None, false, 1, 4},
                 {2, 2, 1, 1, Recompute::Full, false, 1, 2},
                 {1, 2, 2, 2, Recompute::Selective, false, 1, 2, Allgather},
                 {2, 1, 1, 0, Recompute::None, false, 1, 4, Allgather}});
}

TEST_CASE("context parallelism at (cp 2, pp 2) and (dp 2, cp 2) with ZeRO 2 computes the one-rank run", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "context-parallel", {{1, 1, 2, 0, Recompute::None, false, 1, 2}, {2, 1, 1, 2, Recompute::None, false, 1, 2}});
}

TEST_CASE("sequence parallel under bf16 autocast trains as tensor parallelism alone", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("sequence-parallel-bf16-" + family);
  std::vector<RunResult> runs;
  for (bool sp : {false, true}) {
    Config c = model_3d(dir, 6, 1, 4, 1, family);
    c.precision.type = PrecisionType::Bf16;
    c.grid.sequence_parallel = sp;
    c.checkpoint.dir = dir + (sp ? "/ckpt-sp" : "/ckpt-tp");
    runs.push_back(quiet_run(c));
  }
  // bf16 rounds the two orders of summation differently: agreement to bf16's precision.
  REQUIRE(runs[1].losses.size() == runs[0].losses.size());
  for (std::size_t s = 0; s < runs[0].losses.size(); ++s) CHECK(rel(runs[1].losses[s], runs[0].losses[s]) <= 1e-2);
}

TEST_CASE("a vocabulary that tp does not divide (257 over tp = 2) is padded and computes the same", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("vocab257-" + family);
  Config c = model_3d(dir, 4, 2, 2, 2, family);
  c.model.vocab_size = 257;
  c.checkpoint.dir = dir + "/ckpt";
  const auto got = quiet_run(c);
  Config one = model_3d(dir, 4, 1, 1, 1, family);
  one.model.vocab_size = 257;
  check_against_one_rank(c, got, one);
}

TEST_CASE("saved at (2,2,2), loaded at (4,1,2): the same tensors, and training continues", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("reshard3d-" + family);
  Config first = model_3d(dir, 4, 2, 2, 2, family);
  first.checkpoint.dir = dir + "/ckpt";
  quiet_run(first);
  QuietTrainer resumed(resuming(model_3d(dir, 6, 4, 1, 2, family), first.checkpoint.dir));
  REQUIRE(resumed.start_step() == 4);
  const auto rest = resumed.run();
  QuietTrainer straight(model_3d(dir, 6, 1, 1, 1, family), MPI_COMM_SELF);
  const auto want = straight.run();
  REQUIRE(rest.losses.size() == 2);
  for (int s = 4; s < 6; ++s) CHECK(rel(rest.losses[s - 4], want.losses[s]) <= 1e-5);
}

TEST_CASE("saved at (dp 2, cp 4) with ZeRO 1: resumed there bit for bit, and at (dp 4, cp 2) and (dp 2, tp 2, pp 2) "
          "training continues the one-rank run", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("reshard-cp-" + family);
  auto at = [&](int steps, int dp, int tp, int pp, int cp) {
    Config c = model_3d(dir, steps, dp, tp, pp, family);
    c.grid.cp = cp;
    c.optim.zero_stage = 1;  // the optimizer state sharded over dp x cp
    return c;
  };
  check_resume(dir + "/ckpt", [&](int steps) { return at(steps, 2, 1, 1, 4); }, 4, 6);
  QuietTrainer straight(model_3d(dir, 6, 1, 1, 1, family), MPI_COMM_SELF);
  const auto want = straight.run();
  for (auto [dp, tp, pp, cp] : {std::array{4, 1, 1, 2}, {2, 2, 2, 1}}) {
    CAPTURE(dp, tp, pp, cp);
    Config next = at(6, dp, tp, pp, cp);
    next.checkpoint.resume = {Resume::Mode::Path, dir + "/ckpt/step-00000004.h5"};
    next.checkpoint.dir = dir + "/ckpt-" + std::to_string(cp);
    QuietTrainer resumed(next);
    REQUIRE(resumed.start_step() == 4);
    const auto rest = resumed.run();
    REQUIRE(rest.losses.size() == 2);
    for (int s = 4; s < 6; ++s) CHECK(rel(rest.losses[s - 4], want.losses[s]) <= 1e-5);
  }
}

TEST_CASE("2-byte weights: the fp32 masters saved at (2,2,2) with ZeRO 1 load at (4,1,2) with ZeRO 2, the same tensors",
          "[np8]") {
  const auto dir = shared_dir("reshard3d-bf16");
  auto bf16 = [&](int steps, int dp, int tp, int pp, int zero) {
    Config c = model_3d(dir, steps, dp, tp, pp);
    c.precision.type = c.precision.weights = PrecisionType::Bf16;
    c.optim.zero_stage = zero;
    return c;
  };
  Config first = bf16(4, 2, 2, 2, 1);
  first.checkpoint.dir = dir + "/ckpt";
  quiet_run(first);
  const Resume file{Resume::Mode::Path, dir + "/ckpt/step-00000004.h5"};
  Config whole = bf16(6, 1, 1, 1, 0);  // the reference: every tensor whole, on each rank alone
  whole.checkpoint.resume = file;
  QuietTrainer one(whole, MPI_COMM_SELF);
  std::map<std::string, torch::Tensor> want;
  for (const auto& m : one.masters()->masters()) want[m.name] = m.param;
  for (const auto& s : one.optimizer().state()) want[s.name] = s.param;
  Config next = bf16(6, 4, 1, 2, 2);
  next.checkpoint.resume = file;
  QuietTrainer resumed(next);
  REQUIRE(resumed.start_step() == 4);
  check_pieces(resumed.masters()->masters(), want);
  check_pieces(resumed.optimizer().state(), want);
  CHECK(resumed.run().losses.size() == 2);
}

namespace {

// Document-aware training on the test corpus with every word a document (the space, byte 32, as
// the end-of-document token): a window of 16 bytes holds several, so the masks, the restarted
// positions and the global count of tokens with loss all differ between micro-batches and ranks.
void documents(Config& c, Attention attention) {
  c.data.eod_token = ' ';
  c.data.reset_position_ids = c.data.document_mask = c.data.eod_mask_loss = true;
  c.model.attention = attention;
}

}  // namespace

TEST_CASE("document-aware training (positions, mask, loss mask) at (2, 2, 2) with sequence parallelism and "
          "interleaved at (2, 1, 4) with ZeRO 3 and full recomputation computes the one-rank run", "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "documents", {{2, 2, 2, 0, Recompute::None, true}, {2, 1, 4, 3, Recompute::Full, false, 2}},
                [](Config& c) { documents(c, Attention::Sdpa); });
}

TEST_CASE("document-aware training with math attention at (1, 2, 2) with sequence parallelism and at (2, 2, 1) with "
          "ZeRO 1 and selective recomputation computes the one-rank run", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "documents-math", {{1, 2, 2, 0, Recompute::None, true}, {2, 2, 1, 1, Recompute::Selective}},
                [](Config& c) { documents(c, Attention::Math); });
}

TEST_CASE("the loss mask (data.eod_mask_loss) under context parallelism at (dp 2, cp 2) computes the one-rank run: "
          "each cp rank's tokens carry their own share of the global count", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  check_layouts(family, "cp-loss-mask", {{2, 1, 1, 0, Recompute::None, false, 1, 2}}, [](Config& c) {
    c.data.eod_token = ' ';
    c.data.eod_mask_loss = true;
  });
}
