// The image classifier (model.type = cnn, model/cnn.hpp) in whole training runs on a synthetic
// image set (support/corpus.hpp make_images): data parallel against one rank, ZeRO stage 3
// against stage 0, bit-exact resume with the batch-norm statistics, and that it learns. Run under
// mpiexec -n 2.
#include <catch2/catch.hpp>

#include <cmath>

#include "../support/corpus.hpp"
#include "../support/mpi_util.hpp"
#include "../support/training.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// Σ of this rank's batch-norm running statistics, equal on every rank (min = max over ranks).
void check_replicas_agree(Trainer& t) {
  double sum = 0;
  for (auto& [name, b] : t.model().replica_state()) sum += b.sum().item<double>();
  double lo = sum, hi = sum;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi);
}

}  // namespace

TEST_CASE("cnn at dp = 2 trains as one rank running the same micro-batches", "[np2]") {
  const auto dir = shared_image_dir("cnn-dp");
  Log quiet(false);
  Config c = tiny_cnn(dir, 8, 8);  // micro-batch 4: dp 2 x 1, or 1 rank x accumulation 2
  Trainer dp2(c, MPI_COMM_WORLD, quiet, 1.0);
  const RunResult r2 = dp2.run();
  check_replicas_agree(dp2);
  c.output.dir = dir + "/out-self-" + std::to_string(world_rank());
  const RunResult r1 = Trainer(c, MPI_COMM_SELF, quiet, 1.0).run();
  REQUIRE(r1.losses.size() == 8);
  REQUIRE(r2.losses.size() == 8);
  for (std::size_t s = 0; s < r1.losses.size(); ++s) {
    CHECK(r2.losses[s] == Approx(r1.losses[s]).epsilon(1e-5));
    CHECK(r2.grad_norms[s] == Approx(r1.grad_norms[s]).epsilon(1e-5));
  }
  REQUIRE(r2.final_val_accuracy);
  CHECK(*r2.final_val_accuracy >= 0.0);
  CHECK(*r2.final_val_accuracy <= 1.0);
}

TEST_CASE("cnn under ZeRO stage 3 at dp = 2 trains as stage 0", "[np2]") {
  const auto dir = shared_image_dir("cnn-zero");
  Log quiet(false);
  Config c = tiny_cnn(dir, 8, 8);
  const RunResult base = Trainer(c, MPI_COMM_WORLD, quiet, 1.0).run();
  c.optim.zero_stage = 3;
  const RunResult zero = Trainer(c, MPI_COMM_WORLD, quiet, 1.0).run();
  REQUIRE(zero.losses.size() == base.losses.size());
  for (std::size_t s = 0; s < base.losses.size(); ++s) CHECK(zero.losses[s] == Approx(base.losses[s]).epsilon(1e-6));
  REQUIRE(zero.final_val_loss);
  CHECK(*zero.final_val_loss == Approx(*base.final_val_loss).epsilon(1e-6));
}

TEST_CASE("cnn resumes bit for bit, batch-norm running statistics included", "[np2]") {
  const auto dir = shared_image_dir("cnn-resume");
  check_resume([&](int steps) {
    Config c = tiny_cnn(dir, steps, 8);
    c.data.random_crop = 2;
    c.checkpoint.dir = dir + "/ckpt";
    return c;
  }, 4, 8);
}

TEST_CASE("cnn learns the synthetic classes well above chance", "[np2]") {
  const auto dir = shared_image_dir("cnn-learns");
  Log quiet(false);
  Config c = tiny_cnn(dir, 40, 16);
  c.optim.lr = 3e-3;
  c.optim.decay_steps = 0;
  const RunResult r = Trainer(c, MPI_COMM_WORLD, quiet, 1.0).run();
  REQUIRE(r.final_val_accuracy);
  CHECK(*r.final_val_accuracy > 0.9);  // 4 classes: chance is 0.25
}

TEST_CASE("cnn refuses tensor and pipeline parallelism by name", "[np2]") {
  const auto dir = shared_image_dir("cnn-tp");
  Log quiet(false);
  for (const auto& [tp, pp] : {std::pair{2, 1}, std::pair{1, 2}}) {
    Config c = tiny_cnn(dir, 2, 8);
    c.grid.tp = tp;
    c.grid.pp = pp;
    CHECK_THROWS_WITH(Trainer(c, MPI_COMM_WORLD, quiet, 1.0),
                      Catch::Contains("model.type = cnn is data parallel only") && Catch::Contains("grid.tp"));
  }
}

TEST_CASE("cnn: a skipped step leaves the batch-norm statistics as they were; bf16 trains", "[np2]") {
  const auto dir = shared_image_dir("cnn-skip");
  Log quiet(false);
  Config c = tiny_cnn(dir, 2, 8);
  Trainer two(c, MPI_COMM_WORLD, quiet, 1.0);
  two.run();
  c.train.steps = 3;
  c.debug.nonfinite = NonfiniteFault::Loss;  // step 3's loss is NaN on rank 0: every rank skips it
  c.debug.nonfinite_step = 3;
  Trainer skipped(c, MPI_COMM_WORLD, quiet, 1.0);
  const RunResult r = skipped.run();
  REQUIRE(r.skipped == 1);
  CHECK(bitwise_equal(snapshot(skipped), snapshot(two)));  // parameters, optimizer and batch-norm state

  Config bf16 = tiny_cnn(dir, 20, 16);
  bf16.precision.type = PrecisionType::Bf16;
  bf16.optim.lr = 3e-3;
  const RunResult b = Trainer(bf16, MPI_COMM_WORLD, quiet, 1.0).run();
  REQUIRE(b.final_val_accuracy);
  CHECK(std::isfinite(*b.final_val_loss));
  CHECK(*b.final_val_accuracy > 0.5);  // 4 classes: chance is 0.25
}
