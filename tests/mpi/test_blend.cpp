// Weighted blends (data.blend) under MPI: a blend at dp 2 computes the one-rank run with each
// dataset's validation loss reported; resume is bit-exact; other weights at resume are refused
// by name unless data.allow_change, and then continue each dataset where it was; extreme weights
// with a tiny dataset wrap its epochs.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "../support/corpus.hpp"
#include "../support/errors.hpp"
#include "../support/mpi_util.hpp"
#include "../support/training.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

// The test corpus (20,000 bytes) and a tiny one (400 bytes: 22 training windows), both bytes.
struct Blend {
  std::string dir, big, tiny;
};

Blend blend_dir(const std::string& name) {
  Blend b{shared_dir(name), "", ""};
  b.big = b.dir + "/corpus.h5";
  b.tiny = b.dir + "/tiny/corpus.h5";
  if (world_rank() == 0) {
    std::filesystem::create_directories(b.dir + "/tiny");
    make_corpus(b.dir + "/tiny", 400);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return b;
}

Config blended(const Blend& b, int steps, const std::string& weights = "0.7 BIG 0.3 TINY") {
  Config c = tiny(b.dir, steps, 8);
  std::string text = weights;
  text.replace(text.find("BIG"), 3, b.big);
  text.replace(text.find("TINY"), 4, b.tiny);
  c.data.blend = text;
  c.train.eval_interval = 2;
  return c;
}

}  // namespace

TEST_CASE("a blend at dp 2 computes the one-rank run and reports each dataset's validation loss", "[np2]") {
  const Blend b = blend_dir("blend-layout");
  Config c = blended(b, 6);
  c.grid.dp = 2;
  QuietTrainer two(c);
  const auto got = two.run();
  Config one_cfg = blended(b, 6);
  one_cfg.output.dir += "-one";
  QuietTrainer one(one_cfg, MPI_COMM_SELF);
  const auto want = one.run();
  check_same_run(got, want, 1e-5);
  // Each dataset's validation loss, the same at both layouts; ValLoss is their weighted mean.
  REQUIRE((got.final_val_loss && got.final_val_per_dataset.size() == 2 && want.final_val_per_dataset.size() == 2));
  for (int d = 0; d < 2; ++d) CHECK(rel(got.final_val_per_dataset[d], want.final_val_per_dataset[d]) <= 1e-5);
  const auto& per = got.final_val_per_dataset;
  // The same double arithmetic as Validation::run, bar rounding of the weights' normalization.
  CHECK(*got.final_val_loss == Approx(0.7 * per[0] + 0.3 * per[1]).epsilon(1e-9));
  CHECK(per[0] != per[1]);
}

TEST_CASE("a blend resumes bit-exactly; other weights are refused unless data.allow_change", "[np2]") {
  const Blend b = blend_dir("blend-resume");
  check_resume(b.dir + "/ckpt", [&](int steps) {
    Config c = blended(b, steps);
    c.grid.dp = 2;
    return c;
  }, 3, 6);
  // A step-3 checkpoint, resumed with other weights.
  Config first = blended(b, 3);
  first.grid.dp = 2;
  first.checkpoint.dir = b.dir + "/ckpt-weights";
  quiet_run(first);
  Config other = resuming(blended(b, 6, "0.5 BIG 0.5 TINY"), first.checkpoint.dir);
  other.grid.dp = 2;
  const std::string refused = error_of([&] { QuietTrainer t(other); });
  CHECK_THAT(refused, Catch::Contains("data.blend '0.7 " + b.big + " 0.3 " + b.tiny + "' then, '0.5 " + b.big + " 0.5 " +
                                      b.tiny + "' now") && Catch::Contains("data.allow_change = true"));
  other.data.allow_change = true;
  QuietTrainer allowed(other);
  CHECK(allowed.start_step() == 3);
  const auto r = allowed.run();
  REQUIRE(r.losses.size() == 3);
  CHECK(std::isfinite(r.losses.back()));
}

TEST_CASE("extreme weights with a tiny dataset wrap its epochs instead of running past it", "[np2]") {
  const Blend b = blend_dir("blend-extreme");
  Config c = blended(b, 12, "0.001 BIG 0.999 TINY");  // 96 samples, ~96 from 22 windows: 4 epochs
  c.grid.dp = 2;
  QuietTrainer t(c);
  const auto r = t.run();
  CHECK(r.losses.size() == 12);
  CHECK(std::isfinite(r.losses.back()));
  CHECK(t.sample_index() == 96);
}
