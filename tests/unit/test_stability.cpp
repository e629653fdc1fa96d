// The dynamic loss scaler's schedule and the outlier window's exact rollback.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "gridtrain/precision/loss_scaler.hpp"
#include "gridtrain/precision/outlier_window.hpp"

using namespace gridtrain;

TEST_CASE("loss scale halves on overflow, grows after the interval, never below the minimum", "[stability]") {
  LossScaler s({/*init*/ 1024, /*growth*/ 2, /*backoff*/ 0.5, /*interval*/ 3, /*hysteresis*/ 1, /*min*/ 256});
  s.update(false);
  CHECK(s.scale() == 512);
  s.update(true), s.update(true);
  CHECK(s.scale() == 512);
  s.update(true);  // third finite step in a row
  CHECK(s.scale() == 1024);
  s.update(true), s.update(false), s.update(true), s.update(true);  // an overflow resets the count
  CHECK(s.scale() == 512);
  for (int i = 0; i < 10; ++i) s.update(false);
  CHECK(s.scale() == 256);
  CHECK(s.at_min());
}

TEST_CASE("hysteresis: the scale backs off from the second overflow on, until a growth", "[stability]") {
  LossScaler s({65536, 2, 0.5, /*interval*/ 2, /*hysteresis*/ 2, 1});
  s.update(false);
  CHECK(s.scale() == 65536);  // tolerated
  s.update(false);
  CHECK(s.scale() == 32768);
  s.update(false);
  CHECK(s.scale() == 16384);  // hysteresis used up: every overflow backs off (Megatron-LM)
  const auto saved = s.state();
  LossScaler t({65536, 2, 0.5, 2, 2, 1});
  t.set_state(saved);
  s.update(false), t.update(false);
  CHECK(t.scale() == s.scale());
  CHECK(t.scale() == 8192);
  t.update(true), t.update(true);  // growth restores the hysteresis
  CHECK(t.scale() == 16384);
  t.update(false);
  CHECK(t.scale() == 16384);
}

TEST_CASE("outlier window: a rejected value leaves the state exactly as it was", "[stability]") {
  OutlierWindow w(4, 3.0);
  for (double v : {1.0, 1.1, 0.9, 1.0}) {
    CHECK(!w.is_outlier(v));  // no verdict until the window is full
    w.add(v);
  }
  const auto before = w.state();
  CHECK(w.zscore(1.0) == Approx(0.0).margin(1e-12));
  CHECK(w.is_outlier(5.0));  // z = 4 / 0.0707 ≈ 57
  CHECK(!w.is_outlier(-5.0));  // a drop is not a spike
  CHECK(w.state() == before);
  CHECK(!w.is_outlier(1.05));
  w.add(1.05);  // the oldest value (1.0) drops out
  CHECK(w.state() != before);
  OutlierWindow restored(4, 3.0);
  restored.set_state(w.state());
  CHECK(restored.zscore(2.0) == w.zscore(2.0));
  CHECK_THROWS_AS(OutlierWindow(5, 3.0).set_state(before), std::invalid_argument);
}
