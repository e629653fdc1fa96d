// ZeRO stages 1-3 (optim.zero_stage) against stage 0: the same training (losses, gradient
// norms with clipping active), bit-exact resume, checkpoints that load at another dp and stage,
// the reducer's bytes sent and held and the trainer's memory accountant against the formulas of
// Rajbhandari et al. 2020, and a model over a memory budget at stage 0 that trains within it at
// stage 3.
// Run under mpiexec -n 2, -n 4 and -n 8.
#include <catch2/catch.hpp>

#include <algorithm>

#include "../support/training.hpp"
#include "gridtrain/parallel/data_parallel.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// tiny() (as `family`) on every rank as dp, 2 micro-batches per step, clipping active on every step.
Config zero_config(const std::string& dir, int steps, int stage, const std::string& family = "gpt") {
  Config c = as_family(tiny(dir, steps, 4 * world_size()), family);
  c.optim.clip_grad = 0.1;
  c.optim.zero_stage = stage;
  return c;
}

}  // namespace

TEST_CASE("ZeRO stages 1, 2 and 3 train as stage 0 over 20 steps (AdamW; SGD with momentum)", "[np2][np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("zero-eq-" + family);
  for (auto type : {OptimizerType::AdamW, OptimizerType::Sgd}) {
    CAPTURE(name_of(type));
    Config c = zero_config(dir, 20, 0, family);
    c.optim.type = type;
    const auto want = quiet_run(c);
    for (int stage : {1, 2, 3}) {
      CAPTURE(stage);
      c.optim.zero_stage = stage;
      check_same_run(quiet_run(c), want);
    }
    c.optim.zero_prefetch = false;  // stage 3 gathering each layer only when it is used
    check_same_run(quiet_run(c), want);
  }
}

TEST_CASE("ZeRO at (dp, tp, pp) = (2, 2, 2) trains as stage 0 (the tied embedding's shard summed over pp)",
          "[np8]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("zero-3d-" + family);
  Config c = tiny(dir, 20, 8);
  c.model.n_layer = 4;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c = as_family(c, family);
  c.optim.clip_grad = 0.1;
  c.grid.dp = c.grid.tp = c.grid.pp = 2;
  c.comm.bucket_mb = 0.05;  // ~13k floats: the embedding shares a bucket, laid out differently on each stage
  const auto want = quiet_run(c);
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    c.optim.zero_stage = stage;
    check_same_run(quiet_run(c), want);
  }
}

TEST_CASE("ZeRO stage 3 validates with fewer windows on one dp rank than on another", "[np2]") {
  const auto dir = shared_dir("zero-eval");
  Config c = zero_config(dir, 2, 0);
  c.train.eval_samples = 5;  // 3 windows on dp rank 0, 2 on rank 1: 2 and 1 forwards of micro-batch 2
  const auto want = quiet_run(c);
  c.optim.zero_stage = 3;
  const auto got = quiet_run(c);
  REQUIRE(got.final_val_loss);
  CHECK(rel(*got.final_val_loss, *want.final_val_loss) <= 1e-6);
}

TEST_CASE("ZeRO resume is bit-exact", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("zero-resume-" + family);
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    check_resume(dir + "/ckpt-" + std::to_string(stage), [&](int steps) { return zero_config(dir, steps, stage, family); }, 4, 8);
  }
}

TEST_CASE("ZeRO resume at (2, 2, 2) is bit-exact: every dp rank writes and reads its own pieces", "[np8]") {
  // Pieces of fused (c_attn), row-parallel (c_proj) and tied (wte on both ends) tensors, cut
  // anywhere in a row by the buckets, as hyperslabs of the global datasets.
  const auto dir = shared_dir("zero-resume-3d");
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    check_resume(dir + "/ckpt-" + std::to_string(stage), [&](int steps) {
      Config c = tiny(dir, steps, 8);
      c.model.n_layer = 4;
      c.model.n_head = 8;
      c.model.n_embd = 32;
      c.grid.dp = c.grid.tp = c.grid.pp = 2;
      c.optim.zero_stage = stage;
      c.comm.bucket_mb = 0.01;  // ~2.6k floats: buckets end inside rows
      return c;
    }, 3, 6);
  }
}

TEST_CASE("a stage-3 checkpoint from dp = 4 loads at dp = 2 stage 1 and at 1 rank stage 0, bit-exact", "[np4]") {
  const auto dir = shared_dir("zero-reshard");
  // The reference: the same file loaded at stage 0 on dp = 4 (whole tensors on every rank).
  const Config load = save_at_stage3(dir, [&](int steps, int stage) { return zero_config(dir, steps, stage); });
  QuietTrainer dp4(load);
  const auto saved = snapshot(dp4);
  std::map<std::string, torch::Tensor> whole;  // the whole optimizer state as loaded
  for (const auto& s : dp4.optimizer().state()) whole[s.name] = s.param.clone();
  const auto rest = dp4.run();
  const int rank = world_rank();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, rank, &half);
  if (rank < 2) {
    Config at = load;
    at.optim.zero_stage = 1;
    QuietTrainer dp2(at, half);
    REQUIRE(dp2.grid().shape().dp == 2);
    // This rank's pieces of the optimizer state are the elements of the whole state at their offset.
    const auto pieces = dp2.optimizer().state();
    REQUIRE(whole.size() == pieces.size());
    check_pieces(pieces, whole);
    check_same_run(dp2.run(), rest);
  }
  MPI_Comm_free(&half);
  if (rank == 0) {
    QuietTrainer dp1(load, MPI_COMM_SELF);
    CHECK(bitwise_equal(snapshot(dp1), saved));
    check_same_run(dp1.run(), rest);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("ZeRO reducer: bytes sent and held per rank follow the ZeRO formulas", "[np2][np4]") {
  const int dp_size = world_size();
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Axis dp("dp", dup);
  // Ψ = 1024 + 64 elements, divisible by dp (2, 4): no padding, so the formulas hold exactly.
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    std::vector<torch::Tensor> params = {torch::ones({32, 32}).requires_grad_(), torch::ones({64}).requires_grad_()};
    const double psi = 1024 + 64, f = static_cast<double>(dp_size - 1) / dp_size;
    // Two units, used as a model would (stage 3 gathers each before its forward and backward).
    DataParallel data_parallel(params, dp, 100.0, /*overlap=*/true, Compression::None, ZeroOptions{stage, {0, 1}});
    Reducer& reducer = data_parallel.reducer();
    ShardedParameters& sharded = data_parallel.parameters();
    const std::uint64_t before = dp.bytes_sent();  // every byte is counted on the axis it is sent on
    reducer.zero_grad();
    reducer.begin_backward(true);
    sharded.gather(0);
    auto a = sharded.release(0, (params[0] * (world_rank() + 1)).sum(), false);
    sharded.gather(1);
    auto b = sharded.release(1, params[1].sum(), false);
    (a + b).backward();
    reducer.finish();
    std::uint64_t sent = dp.bytes_sent() - before;
    if (stage > 0) {
      // Each rank's pieces hold the dp-mean of its part of the gradient: (1+..+dp)/dp for the
      // matrix, 1 for the bias.
      const auto pieces = data_parallel.shard_pieces();
      std::int64_t held = 0;
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        held += pieces[i].param.numel();
        const double want = i == 0 ? (dp_size + 1) / 2.0 : 1.0;
        CHECK(torch::allclose(pieces[i].param.grad(), torch::full_like(pieces[i].param, want)));
        pieces[i].param.sub_(1.0);  // "the update": every element of this rank's shard becomes 0
      }
      CHECK(held == static_cast<std::int64_t>(psi) / dp_size);
      sharded.all_gather();
      sent = dp.bytes_sent() - before;  // the step's; gathering every unit for the check below is not
      const WholeParameters whole(sharded);
      for (const auto& p : params) CHECK(torch::equal(p.detach(), torch::zeros_like(p)));  // every shard arrived
    }
    // Stage 0 allreduces (2Ψ(dp−1)/dp); stages 1–2 reduce-scatter and all-gather (Ψ(dp−1)/dp
    // each); stage 3 all-gathers each unit for its forward and its backward and reduce-scatters.
    CHECK(sent == static_cast<std::uint64_t>((stage == 3 ? 3 : 2) * psi * f * sizeof(float)));
    // Held after the step: gradients Ψ (stages 0–1), Ψ/dp (2–3); parameters Ψ (0: the model's own
    // tensors; 1–2: the flat buckets), Ψ/dp (3).
    CHECK(reducer.gradient_bytes() == static_cast<std::uint64_t>((stage >= 2 ? psi / dp_size : psi) * sizeof(float)));
    const double params_held = stage == 3 ? psi / dp_size : psi;
    CHECK(sharded.bytes() == static_cast<std::uint64_t>(params_held * sizeof(float)));
  }
}

TEST_CASE("the memory accountant's bytes per rank match the ZeRO formulas at every stage", "[np4]") {
  const auto dir = shared_dir("zero-memory");
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    QuietTrainer t(zero_config(dir, 2, stage));
    t.run();
    const double psi = static_cast<double>(count_parameters(t.model())), dp = world_size(), k = 8;  // AdamW: m, v
    const StateBytes got = t.state_bytes();
    // Rajbhandari et al. 2020, fp32: parameters 4Ψ, gradients 4Ψ, optimizer state KΨ, each / dp
    // from its stage on (3, 2, 1).
    const double want[3] = {4 * psi / (stage >= 3 ? dp : 1), 4 * psi / (stage >= 2 ? dp : 1),
                            k * psi / (stage >= 1 ? dp : 1)};
    CHECK(got.params == Approx(want[0]).epsilon(0.05));
    CHECK(got.grads == Approx(want[1]).epsilon(0.05));
    CHECK(got.optimizer == Approx(want[2]).epsilon(0.05));
  }
}

TEST_CASE("a model whose stage-0 state exceeds debug.alloc_limit_mb trains within it at stage 3", "[np4]") {
  const auto dir = shared_dir("zero-budget");
  auto config = [&](int stage) {
    Config c = zero_config(dir, 3, stage);
    c.model.n_layer = 8;  // many small units: stage 3 holds a few whole at a time
    c.model.n_embd = 32;
    return c;
  };
  QuietTrainer plain(config(0));
  const double state0 = plain.state_bytes().peak();
  const auto want = plain.run();
  const double budget = 0.6 * state0 + plain.model().plan().activation_bytes(2, 4, 1);
  Config over = config(0);
  over.debug.alloc_limit_mb = budget / (1024.0 * 1024.0);
  CHECK_THROWS_WITH(quiet_run(over), Catch::Contains("out of memory"));
  Config within = config(3);
  within.debug.alloc_limit_mb = over.debug.alloc_limit_mb;
  QuietTrainer zero3(within);
  check_same_run(zero3.run(), want);
  CHECK(zero3.state_bytes().peak() < 0.6 * state0);
}
