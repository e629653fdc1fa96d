// Stability under MPI: a non-finite loss or gradient on one rank makes every rank skip the same
// update; out-of-memory backoff gives the run that started with the smaller micro-batch; the
// loss scaler's state survives a resume bit for bit.
#include <catch2/catch.hpp>

#include <cstring>

#include "../support/training.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// The same bytes on every rank of world.
bool identical_across_ranks(const std::vector<torch::Tensor>& state) {
  for (const auto& t : state) {
    auto lo = t.clone(), hi = t.clone();
    MPI_Allreduce(MPI_IN_PLACE, lo.data_ptr<float>(), static_cast<int>(lo.numel()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, hi.data_ptr<float>(), static_cast<int>(hi.numel()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    if (!torch::equal(lo, hi)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a NaN loss or an Inf gradient on one rank: every rank skips that update", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("skip-" + family);
  for (int tp : {1, 2}) {  // dp = 4, and dp = 2 x tp = 2
    Config base = as_family(tiny(dir, 1, 8), family);
    base.grid.tp = tp;
    if (base.model.type == ModelType::Llama) base.model.n_kv_head = 2;  // tp = 2 splits the key/value heads
    QuietTrainer one_step(base);
    one_step.run();
    const auto after_step_1 = snapshot(one_step);
    // Rank 3 is tp rank 1 at tp = 2: a rank whose loss does not enter the mean still flags it.
    for (auto [kind, rank] : {std::pair{NonfiniteFault::Loss, 2}, {NonfiniteFault::Loss, 3}, {NonfiniteFault::Grad, 2}}) {
      CAPTURE(tp, name_of(kind), rank);
      Config c = base;
      c.train.steps = 2;
      c.debug.nonfinite = kind;
      c.debug.nonfinite_step = 2;
      c.debug.nonfinite_rank = rank;
      QuietTrainer t(c);
      const auto r = t.run();
      CHECK(r.skipped == 1);
      // The skipped step consumed its data (and its LR slot: lr is a function of the step count);
      // Adam's step count did not advance.
      CHECK(t.sample_index() == 2 * 8);
      CHECK(t.optimizer().steps() == 1);
      long long skipped[2] = {r.skipped, r.skipped};  // the same count on every rank
      MPI_Allreduce(MPI_IN_PLACE, &skipped[0], 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &skipped[1], 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
      CHECK(skipped[0] == skipped[1]);
      CHECK(bitwise_equal(snapshot(t), after_step_1));  // step 2 changed nothing
      if (tp == 1) CHECK(identical_across_ranks(snapshot(t)));  // (with tp, shards differ by design)
    }
  }
}

TEST_CASE("persistent non-finite steps stop the run with the step named, on every rank", "[np2]") {
  const auto dir = shared_dir("persistent");
  Config c = tiny(dir, 20, 4);
  c.debug.nonfinite = NonfiniteFault::Grad;
  c.debug.nonfinite_step = 3;
  c.debug.nonfinite_steps = 100;
  c.debug.nonfinite_rank = 1;
  c.train.max_consecutive_skips = 4;
  QuietTrainer t(c);
  CHECK_THROWS_WITH(t.run(), Catch::Contains("step 6: 4 updates in a row were skipped"));
}

TEST_CASE("out-of-memory backoff finishes with the losses of a run that started small", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("oom-" + family);
  Config small = as_family(tiny(dir, 4, 8), family);
  small.train.micro_batch = 1;
  const auto want = quiet_run(small);
  Config big = as_family(tiny(dir, 4, 8), family);
  big.train.micro_batch = 4;
  big.train.on_oom = OnOom::Backoff;
  QuietTrainer probe(big);  // the limit: between the needs of 1 and 2 sequences
  big.debug.alloc_limit_mb = (1.5 * probe.model().plan().activation_bytes(1, 4, 1) + probe.state_bytes().peak()) / (1024.0 * 1024.0);
  QuietTrainer backed_off(big);
  const auto got = backed_off.run();
  CHECK(backed_off.accumulation() == 4);
  CHECK(got.losses == want.losses);  // bit for bit
  big.train.on_oom = OnOom::Abort;
  QuietTrainer aborts(big);
  CHECK_THROWS_WITH(aborts.run(), Catch::Contains("step 1: out of memory in forward/backward on 2 rank(s)"));
}

TEST_CASE("resume with a grown loss scale (bf16, dynamic scaling) is bit-exact", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("resume-scaler-" + family);
  auto config = [&](int steps) {
    Config c = as_family(tiny(dir, steps, 4), family);
    c.precision.type = PrecisionType::Bf16;
    c.precision.loss_scaling = LossScaling::Dynamic;
    c.precision.init_scale = 1024;
    c.precision.growth_interval = 2;
    return c;
  };
  QuietTrainer straight(config(8));
  const auto full = straight.run();
  CHECK(full.loss_scale == 16384);  // grown every 2 steps
  Config first = config(3);
  first.checkpoint.dir = dir + "/ckpt";
  const auto part = quiet_run(first);
  CHECK(part.loss_scale == 2048);  // not the initial scale, and one step into the next interval
  QuietTrainer resumed(resuming(config(8), first.checkpoint.dir));
  const auto rest = resumed.run();
  CHECK(rest.loss_scale == full.loss_scale);
  REQUIRE(full.losses.size() == 8);
  REQUIRE(rest.losses.size() == 5);
  for (int s = 3; s < 8; ++s) CHECK(rest.losses[s - 3] == full.losses[s]);
  CHECK(bitwise_equal(snapshot(resumed), snapshot(straight)));
}
