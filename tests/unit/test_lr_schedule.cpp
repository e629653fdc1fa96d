#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "gridtrain/config/config.hpp"
#include "gridtrain/optim/lr_schedule.hpp"

using namespace gridtrain;

TEST_CASE("warmup is positive at step 0 and reaches the peak at its last step", "[lr]") {
  Config c;
  c.optim.lr = 1.0;
  c.optim.min_lr = 0.1;
  c.optim.warmup_steps = 4;
  c.train.steps = 14;
  const LrSchedule lr(c);
  // Table for steps 0..14: warmup (s+1)/4, then cosine from 1 to 0.1 over steps 4..14.
  const double expected[] = {0.25, 0.5, 0.75, 1.0};
  for (int s = 0; s < 4; ++s) CHECK(lr(s) == Approx(expected[s]));
  for (int s = 4; s <= 14; ++s) {
    const double p = (s - 4) / 10.0;
    CHECK(lr(s) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * p))));
  }
  CHECK(lr(4) == Approx(1.0));  // the step after warmup starts the decay at the peak
  CHECK(lr(14) == Approx(0.1));
  CHECK(lr(100) == Approx(0.1));
}

TEST_CASE("linear and constant schedules, no warmup, and the linear scaling rule", "[lr]") {
  Config c;
  c.optim.lr = 2.0;
  c.optim.min_lr = 0.0;
  c.optim.warmup_steps = 0;
  c.train.steps = 10;
  c.optim.schedule = LrDecay::Linear;
  CHECK(LrSchedule(c)(0) == Approx(2.0));
  CHECK(LrSchedule(c)(5) == Approx(1.0));
  c.optim.schedule = LrDecay::Constant;
  CHECK(LrSchedule(c)(9) == Approx(2.0));
  c.optim.scale_lr = LrScaling::Linear;
  c.optim.reference_batch = 8;
  c.train.global_batch = 32;
  CHECK(LrSchedule(c).peak() == Approx(8.0));
}
