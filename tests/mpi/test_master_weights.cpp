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

// c trained from its initial weights rounded to bf16 (fp32 weights stay fp32 after): the run that
// one bf16 rounding of the weights makes on this host's kernels.
RunResult run_from_rounded(const Config& c) {
  QuietTrainer t(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : t.model().parameters()) p.copy_(p.to(torch::kBFloat16));
  }
  return t.run();
}

// How far a 2-byte-weights run may stray from the fp32-weights run `want` at each step, measured
// on this host rather than fixed: `once` is `want` restarted from bf16-rounded weights (one
// rounding, run_from_rounded). The 2-byte run rounds its weights after every update and its
// gradients once per step, each a perturbation of that size, so to first order its difference at
// step s is a sum of 2(s + 1) terms no larger than the largest one rounding made up to then. On
// top, what it computes on bf16 tensors where fp32 weights keep fp32 (norms, the residual
// stream, the gradients themselves) is one bf16 rounding, u = 2^-9 relative, of the loss
// (log-softmax is 1-Lipschitz in its logits) and of the gradient norm.
// Returns the bound per step for `of` (losses or grad_norms).
std::vector<double> rounding_bounds(const RunResult& want, const RunResult& once,
                                    std::vector<double> RunResult::*of) {
  std::vector<double> bounds;
  double largest = 0;
  for (std::size_t s = 0; s < (want.*of).size(); ++s) {
    largest = std::max(largest, rel((once.*of)[s], (want.*of)[s]));
    bounds.push_back(2.0 * static_cast<double>(s + 1) * largest + std::ldexp(1.0, -9));
  }
  return bounds;
}

}  // namespace

TEST_CASE("2-byte weights: bf16 parameters and gradients, fp32 masters, state bytes as Rajbhandari et al. count them",
          "[np4]") {
  const auto dir = shared_dir("bf16-memory");
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    QuietTrainer t(bf16_config(dir, 2, stage));
    t.run();
    for (const auto& p : t.model().parameters()) CHECK(p.scalar_type() == torch::kBFloat16);
    CHECK(std::string(t.groups().group(0).reducer().gradient_dtype()) == "bf16");
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
  const auto exact = quiet_run(fp32), once = run_from_rounded(fp32);
  const auto loss_bound = rounding_bounds(exact, once, &RunResult::losses);
  const auto norm_bound = rounding_bounds(exact, once, &RunResult::grad_norms);
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    CAPTURE(s, want.losses[s], exact.losses[s], once.losses[s], want.grad_norms[s], exact.grad_norms[s]);
    CHECK(rel(want.losses[s], exact.losses[s]) <= loss_bound[s]);
    CHECK(rel(want.grad_norms[s], exact.grad_norms[s]) <= norm_bound[s]);
  }
}

TEST_CASE("2-byte weights: resume is bit-exact at ZeRO 0, 1, 2 and 3", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("bf16-resume-" + family);
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    check_resume(dir + "/ckpt-" + std::to_string(stage), [&](int steps) { return bf16_config(dir, steps, stage, family); }, 4, 8);
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
  // Before the freeze 1-bit Adam is Adam, so the 2-byte run keeps within the rounding bound of the
  // AdamW case. After it, sign compression turns a rounding difference into another step (a
  // coordinate near 0 flips sign), and the runs part by as much as kernels differ: compared
  // there is that the 2-byte run learns, over its last 4 steps, at least half as much as fp32.
  const Config fp32 = config(12, PrecisionType::Fp32);
  const auto want = quiet_run(fp32), once = run_from_rounded(fp32), got = quiet_run(config(12, PrecisionType::Bf16));
  REQUIRE(got.losses.size() == 12);
  REQUIRE(want.losses.size() == 12);
  const auto bound = rounding_bounds(want, once, &RunResult::losses);
  for (std::size_t s = 0; s < 2; ++s) CHECK(rel(got.losses[s], want.losses[s]) <= bound[s]);
  auto drop = [](const RunResult& r) {
    return r.losses[0] - (r.losses[8] + r.losses[9] + r.losses[10] + r.losses[11]) / 4;
  };
  CAPTURE(drop(want), drop(got));
  CHECK(drop(want) > 0);
  CHECK(drop(got) > drop(want) / 2);
  check_resume(dir + "/ckpt", [&](int steps) { return config(steps, PrecisionType::Bf16); }, 5, 8);
}

TEST_CASE("2-byte weights: a checkpoint of fp32 masters from ZeRO 3 at dp = 4 loads at dp = 2 stage 1, and into fp32 "
          "weights on 1 rank, bit-exact", "[np4]") {
  const auto dir = shared_dir("bf16-reshard");
  // The reference: the file loaded at stage 0 on dp = 4, whole masters and state on every rank.
  const Config load = save_at_stage3(dir, [&](int steps, int stage) { return bf16_config(dir, steps, stage); });
  QuietTrainer dp4(load);
  const auto whole = fp32_state(dp4);
  for (auto& p : dp4.model().named_parameters(true))  // each parameter is its master rounded to bf16
    CHECK(torch::equal(p.value(), whole.at(p.key()).to(torch::kBFloat16)));
  const int rank = world_rank();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, rank, &half);
  if (rank < 2) {
    Config at = load;
    at.optim.zero_stage = 1;
    QuietTrainer dp2(at, half);
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
    QuietTrainer one(fp32, MPI_COMM_SELF);
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
