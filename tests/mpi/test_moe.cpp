// Run under mpiexec -n 2: a mixture-of-experts llama (model/moe.hpp) trains at dp 2, with ZeRO
// stages 0, 1 and 3, as one rank does with the same micro-batches; its balancing losses are in
// the training loss; a resume is bit-exact; a checkpoint written at dp 2 under ZeRO 3 (the
// experts under their own names) loads on one rank as the weights that rank trained.
#include <catch2/catch.hpp>

#include "../support/training.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

TEST_CASE("moe: dp 2 with ZeRO 0, 1 and 3 trains as one rank; the balancing losses are in the loss", "[np2]") {
  const auto dir = shared_dir("moe-dp");
  QuietTrainer one(moe_llama(dir, 5, 1), MPI_COMM_SELF);
  const RunResult want = one.run();
  CHECK(want.losses.back() < want.losses.front());
  for (const int zero : {0, 1, 3}) {
    CAPTURE(zero);
    Config c = moe_llama(dir, 5, 2);
    c.optim.zero_stage = zero;
    c.checkpoint.dir = dir + "/ckpt-zero" + std::to_string(zero);
    QuietTrainer t(c);
    check_same_run(t.run(), want, 1e-5);
    // The file holds every expert under its name: loaded whole on one rank, it is what one rank trained.
    QuietTrainer loaded(resuming(moe_llama(dir, 5, 1), c.checkpoint.dir), MPI_COMM_SELF);
    CHECK(rel_diff(loaded.model(), one.model()) <= 1e-5);
  }
  // Step 1's loss (the same weights) is the cross-entropy plus coeff · (aux + z-loss terms).
  Config none = moe_llama(dir, 1, 1), heavy = moe_llama(dir, 1, 1);
  none.moe.aux_loss_coeff = 0.0, none.moe.z_loss_coeff = 0.0, heavy.moe.aux_loss_coeff = 1.0, heavy.moe.z_loss_coeff = 0.0;
  const double added = quiet_run(heavy, MPI_COMM_SELF).losses[0] - quiet_run(none, MPI_COMM_SELF).losses[0];
  // The mean over micro-batches of E · Σ f·P: near k = 2 for a router at initialization, below E = 4.
  CHECK(added > 1.5);
  CHECK(added < 4.0);
}

TEST_CASE("moe: a resume at dp 2 continues the run bit for bit", "[np2]") {
  const auto dir = shared_dir("moe-resume");
  check_resume(dir + "/ckpt", [&](int steps) { return moe_llama(dir, steps, 2); }, 3, 6);
}
