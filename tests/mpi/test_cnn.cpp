// The image classifier (model.type = cnn, model/cnn.hpp) in whole training runs on a synthetic
// image set (support/corpus.hpp make_images): data parallel against one rank, ZeRO stage 3
// against stage 0, bit-exact resume with the batch-norm statistics, and that it learns. Run under
// mpiexec -n 2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>

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

// What a classifier that has learned nothing scores on dir's test images (all of them: tiny_cnn's
// train.eval_samples = 64 is the whole test set, make_images's 64), read from the labels file that
// make_images wrote. A predictor whose guess is independent of the image (constant, or random with
// class probabilities q) gets image i right with probability q[y_i]: its expected accuracy mu is
// sum_k q_k f_k <= f_max = p (f: the test set's class fractions), and by Jensen the variance of its
// accuracy, sum_i q[y_i](1 - q[y_i]) / n^2, is at most mu(1 - mu) / n <= p(1 - p) / n while p <= 1/2.
// So p + 6 sigma, sigma = sqrt(p(1 - p) / n), is 6 sigma above anything such a predictor reaches,
// whichever kernels ran. entropy = H(f) nats: by Gibbs' inequality no image-independent
// distribution over the classes has a lower cross-entropy on these labels.
struct Chance {
  double p = 0, sigma = 0, entropy = 0;
  int n = 0;
  double above(double sigmas) const { return p + sigmas * sigma; }
};

Chance chance_on_test_images(const std::string& dir, const Config& c) {
  std::ifstream in(dir + "/test-labels.idx", std::ios::binary);
  REQUIRE(in);
  in.ignore(8);  // IDX header: magic (0, 0, 8, 1) and the count, big-endian
  const std::string labels{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(labels.size() == static_cast<std::size_t>(c.train.eval_samples));  // validation = every test image
  std::array<int, 4> count{};  // make_images: 4 classes
  for (const char y : labels) {
    REQUIRE((y >= 0 && y < 4));
    ++count[static_cast<std::size_t>(y)];
  }
  Chance ch;
  ch.n = static_cast<int>(labels.size());
  ch.p = static_cast<double>(*std::max_element(count.begin(), count.end())) / ch.n;
  REQUIRE(ch.p <= 0.5);  // the variance bound above holds for p <= 1/2
  ch.sigma = std::sqrt(ch.p * (1 - ch.p) / ch.n);
  for (const int k : count)
    if (k > 0) ch.entropy -= static_cast<double>(k) / ch.n * std::log(static_cast<double>(k) / ch.n);
  return ch;
}

}  // namespace

TEST_CASE("cnn at dp = 2 trains as one rank running the same micro-batches", "[np2]") {
  const auto dir = shared_image_dir("cnn-dp");
  Config c = tiny_cnn(dir, 8, 8);  // micro-batch 4: dp 2 x 1, or 1 rank x accumulation 2
  QuietTrainer dp2(c);
  const RunResult r2 = dp2.run();
  check_replicas_agree(dp2);
  c.output.dir = dir + "/out-self-" + std::to_string(world_rank());
  const RunResult r1 = quiet_run(c, MPI_COMM_SELF);
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
  Config c = tiny_cnn(dir, 8, 8);
  const RunResult base = quiet_run(c);
  c.optim.zero_stage = 3;
  const RunResult zero = quiet_run(c);
  REQUIRE(zero.losses.size() == base.losses.size());
  for (std::size_t s = 0; s < base.losses.size(); ++s) CHECK(zero.losses[s] == Approx(base.losses[s]).epsilon(1e-6));
  REQUIRE(zero.final_val_loss);
  CHECK(*zero.final_val_loss == Approx(*base.final_val_loss).epsilon(1e-6));
}

TEST_CASE("cnn resumes bit for bit, batch-norm running statistics included", "[np2]") {
  const auto dir = shared_image_dir("cnn-resume");
  check_resume(dir + "/ckpt", [&](int steps) {
    Config c = tiny_cnn(dir, steps, 8);
    c.data.random_crop = 2;
    return c;
  }, 4, 8);
}

TEST_CASE("cnn learns the synthetic classes well above chance", "[np2]") {
  const auto dir = shared_image_dir("cnn-learns");
  Config c = tiny_cnn(dir, 40, 16);
  c.optim.lr = 3e-3;
  c.optim.decay_steps = 0;
  const RunResult r = quiet_run(c);
  REQUIRE(r.final_val_accuracy);
  REQUIRE(r.final_val_loss);
  const Chance chance = chance_on_test_images(dir, c);
  CAPTURE(chance.p, chance.sigma, chance.entropy, *r.final_val_accuracy, *r.final_val_loss);
  // 6 sigma above the best a classifier that ignores its input can expect (chance_on_test_images):
  // make_images's largest class is p = 0.36 of the 64 test images, sigma = 0.06, so about 0.72,
  // whatever the kernels (4 equal classes would give 0.25 + 6 x 0.054 = 0.58).
  CHECK(*r.final_val_accuracy > chance.above(6));
  // An image-independent prediction scores at least H(f) nats (Gibbs; H(f) = 1.35 here, ln 4 = 1.39
  // at equal classes). Require under half of that: the geometric mean of the probability given to
  // the right class, exp(-loss), at least the square root of the best the class fractions allow.
  CHECK(*r.final_val_loss < chance.entropy / 2);
}

TEST_CASE("cnn refuses tensor and pipeline parallelism by name", "[np2]") {
  const auto dir = shared_image_dir("cnn-tp");
  for (const auto& [tp, pp] : {std::pair{2, 1}, std::pair{1, 2}}) {
    Config c = tiny_cnn(dir, 2, 8);
    c.grid.tp = tp;
    c.grid.pp = pp;
    CHECK_THROWS_WITH(QuietTrainer(c),
                      Catch::Contains("model.type = cnn is data parallel only") && Catch::Contains("grid.tp"));
  }
}

TEST_CASE("cnn: a skipped step leaves the batch-norm statistics as they were; bf16 trains", "[np2]") {
  const auto dir = shared_image_dir("cnn-skip");
  Config c = tiny_cnn(dir, 2, 8);
  QuietTrainer two(c);
  two.run();
  c.train.steps = 3;
  c.debug.nonfinite = NonfiniteFault::Loss;  // step 3's loss is NaN on rank 0: every rank skips it
  c.debug.nonfinite_step = 3;
  QuietTrainer skipped(c);
  const RunResult r = skipped.run();
  REQUIRE(r.skipped == 1);
  CHECK(bitwise_equal(snapshot(skipped), snapshot(two)));  // parameters, optimizer and batch-norm state

  // bf16 trains: measured against an fp32 run of the same config on the same kernels, not against a
  // fixed figure (AMX, AVX512-BF16 and emulated bf16 take other trajectories). The fp32 run must be
  // 6 sigma above chance (chance_on_test_images), and bf16 must gain at least half of fp32's gain
  // over chance (the test_master_weights.cpp rule: bf16 learns at least half as much as fp32).
  Config fp32 = tiny_cnn(dir, 40, 16);  // the config of "cnn learns the synthetic classes well above chance"
  fp32.optim.lr = 3e-3;
  fp32.optim.decay_steps = 0;
  Config bf16 = fp32;
  bf16.precision.type = PrecisionType::Bf16;
  const RunResult f = quiet_run(fp32);
  const RunResult b = quiet_run(bf16);
  REQUIRE(f.final_val_accuracy);
  REQUIRE(b.final_val_accuracy);
  CHECK(std::isfinite(*b.final_val_loss));
  const Chance chance = chance_on_test_images(dir, fp32);
  CAPTURE(chance.p, chance.sigma, *f.final_val_accuracy, *b.final_val_accuracy);
  CHECK(*f.final_val_accuracy > chance.above(6));
  CHECK(*b.final_val_accuracy - chance.p >= 0.5 * (*f.final_val_accuracy - chance.p));
}
