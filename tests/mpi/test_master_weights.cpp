// precision.weights = bf16: 2-byte parameters and gradients with fp32 master weights sharded
// with the optimizer state. The dtypes and the memory accountant against Rajbhandari et al.'s
// accounting, ZeRO 1-3 against stage 0, training against fp32 weights (AdamW; 1-bit Adam), bit-exact
// resume at every stage, and checkpoints of fp32 masters that load at another dp and stage and into
// fp32 weights.
// Run under mpiexec -n 2 and -n 4.
#include <catch2/catch.hpp>

#include <map>

#include "../support/training.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// tiny() (as `family`) on every rank as dp with bf16 weights (and the bf16 compute they need),
// 2 micro-batches per step, clipping active on every step.
Config bf16_config(const std::string& dir, int steps, int stage, const std::string& family = "gpt") {
  Config c = as_family(tiny(dir, steps, 4 * world_size()), family);
  c.precision.type = c.precision.weights = PrecisionType::Bf16;
  c.optim.clip_grad = 0.1;
  c.optim.zero_stage = stage;
  return c;
}

// Name → clone of every fp32 master (whole at stage 0) and optimizer state tensor of t.
std::map<std::string, torch::Tensor> fp32_state(Trainer& t) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& m : t.masters()->masters()) out[m.name] = m.param.clone();
  for (const auto& s : t.optimizer().state()) out[s.name] = s.param.clone();
  return out;
}

}  // namespace

TEST_CASE("2-byte weights: bf16 parameters and gradients, fp32 masters, state bytes as Rajbhandari et al. count them",
          "[np4]") {
  const auto dir = shared_dir("bf16-memory");
  Log quiet(false);
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    Trainer t(bf16_config(dir, 2, stage), MPI_COMM_WORLD, quiet, 1.0);
    t.run();
    for (const auto& p : t.model().parameters()) CHECK(p.scalar_type() == torch::kBFloat16);
    CHECK(std::string(t.reducer().gradient_dtype()) == "bf16");
    REQUIRE(t.masters() != nullptr);
    for (const auto& m : t.masters()->masters()) CHECK(m.param.scalar_type() == torch::kFloat);
    // 2Ψ parameters, 2Ψ gradients and 12Ψ of fp32 master, momentum and variance, each / dp from
    // its stage on (3, 2, 1); within the padding of the buckets to equal shards.
    const double psi = static_cast<double>(count_parameters(t.model()));
    const auto want = zero_state_bytes(stage, psi, OptimizerType::AdamW, PrecisionType::Bf16, world_size());
    const StateBytes got = t.state_bytes();
    CHECK(got.params == Approx(want[0]).epsilon(0.05));
    CHECK(got.grads == Approx(want[1]).epsilon(0.05));
    CHECK(got.optimizer == Approx(want[2]).epsilon(0.05));
  }
}

TEST_CASE("2-byte weights: ZeRO 1, 2 and 3 train as stage 0, and as fp32 weights within bf16 rounding", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("bf16-zero-" + family);
  const auto want = quiet_run(bf16_config(dir, 8, 0, family));
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    check_same_run(quiet_run(bf16_config(dir, 8, stage, family)), want);
  }
  Config fp32 = bf16_config(dir, 8, 0, family);
  fp32.precision.weights = PrecisionType::Fp32;
  const auto got = quiet_run(fp32);
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(rel(want.losses[s], got.losses[s]) < 1e-2);  // bf16 keeps 8 significant bits: 2^-9 per rounding
    CHECK(rel(want.grad_norms[s], got.grad_norms[s]) < 5e-2);
  }
}

TEST_CASE("2-byte weights: resume is bit-exact at ZeRO 0, 1, 2 and 3", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("bf16-resume-" + family);
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    check_resume([&](int steps) {
      Config c = bf16_config(dir, steps, stage, family);
      c.checkpoint.dir = dir + "/ckpt-" + std::to_string(stage);
      return c;
    }, 4, 8);
  }
}

TEST_CASE("2-byte weights with 1-bit Adam: its compressed momentum exchange over fp32 masters tracks fp32 weights, and "
          "resumes bit-exactly after its freeze", "[np2]") {
  const auto dir = shared_dir("bf16-onebit");
  auto config = [&](int steps, PrecisionType weights) {
    Config c = bf16_config(dir, steps, 0);
    c.precision.weights = weights;
    c.optim.type = OptimizerType::OnebitAdam;
    c.optim.freeze_step = 2;
    return c;
  };
  // Sign compression with error feedback turns a rounding difference into a different step (the
  // loss right after the freeze differs by a few %), so the runs are compared over their last 4
  // steps, by then within 2 % of each other.
  const auto want = quiet_run(config(12, PrecisionType::Fp32)), got = quiet_run(config(12, PrecisionType::Bf16));
  REQUIRE(got.losses.size() == 12);
  REQUIRE(want.losses.size() == 12);
  auto tail = [](const RunResult& r) { return (r.losses[8] + r.losses[9] + r.losses[10] + r.losses[11]) / 4; };
  CHECK(rel(tail(got), tail(want)) < 2e-2);
  CHECK(tail(got) < got.losses[0] - 0.5);  // and it learns
  check_resume([&](int steps) {
    Config c = config(steps, PrecisionType::Bf16);
    c.checkpoint.dir = dir + "/ckpt";
    return c;
  }, 5, 8);
}

TEST_CASE("2-byte weights: a checkpoint of fp32 masters from ZeRO 3 at dp = 4 loads at dp = 2 stage 1, and into fp32 "
          "weights on 1 rank, bit-exact", "[np4]") {
  const auto dir = shared_dir("bf16-reshard");
  Log quiet(false);
  // The reference: the file loaded at stage 0 on dp = 4, whole masters and state on every rank.
  const Config load = save_at_stage3(dir, [&](int steps, int stage) { return bf16_config(dir, steps, stage); });
  Trainer dp4(load, MPI_COMM_WORLD, quiet, 1.0);
  const auto whole = fp32_state(dp4);
  for (auto& p : dp4.model().named_parameters(true))  // each parameter is its master rounded to bf16
    CHECK(torch::equal(p.value(), whole.at(p.key()).to(torch::kBFloat16)));
  const int rank = world_rank();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, rank, &half);
  if (rank < 2) {
    Config at = load;
    at.optim.zero_stage = 1;
    Trainer dp2(at, half, quiet, 1.0);
    REQUIRE(dp2.grid().shape().dp == 2);
    // This rank's pieces of the masters and of the optimizer state are the whole tensors' elements
    // at their offsets.
    check_pieces(dp2.masters()->masters(), whole);
    check_pieces(dp2.optimizer().state(), whole);
    CHECK(dp2.run().losses.size() == 2);
  }
  MPI_Comm_free(&half);
  if (rank == 0) {  // fp32 weights: the masters are the parameters
    Config fp32 = load;
    fp32.precision.weights = PrecisionType::Fp32;
    Trainer one(fp32, MPI_COMM_SELF, quiet, 1.0);
    CHECK(one.masters() == nullptr);
    for (auto& p : one.model().named_parameters(true)) {
      CAPTURE(p.key());
      CHECK(torch::equal(p.value(), whole.at(p.key())));
    }
    for (const auto& s : one.optimizer().state()) CHECK(torch::equal(s.param, whole.at(s.name)));
    CHECK(one.run().losses.size() == 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
