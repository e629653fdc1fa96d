// The pipeline schedules against their definitions, and the stage split rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <tuple>
#include <stdexcept>

#include "gridtrain/config/config.hpp"
#include "gridtrain/parallel/pipeline.hpp"

using namespace gridtrain;

namespace {

// Checks a stage's order against the 1F1B definition (PipeDream-Flush): every micro-batch once
// forward and once backward, forwards and backwards each in micro-batch order, backward m after
// forward m, min(p − s − 1, m) forwards before the first backward, then strict alternation
// while forwards remain, and never more than p − s activations in flight.
void check_1f1b(const std::vector<PipeOp>& ops, int s, int p, int m) {
  REQUIRE(ops.size() == static_cast<std::size_t>(2 * m));
  int f = 0, b = 0, in_flight = 0, max_in_flight = 0;
  for (const auto& op : ops) {
    if (op.kind == PipeOp::Forward) {
      CHECK(op.micro_batch == f++);
      max_in_flight = std::max(max_in_flight, ++in_flight);
    } else {
      CHECK(op.micro_batch == b++);
      CHECK(op.micro_batch < f);
      --in_flight;
    }
  }
  CHECK(max_in_flight <= std::min(p - s, m));
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) CHECK(ops[i].kind == PipeOp::Forward);
  for (int i = warmup; i < m; ++i) {  // steady state: F(i) B(i − warmup)
    CHECK(ops[warmup + 2 * (i - warmup)] == PipeOp{PipeOp::Forward, i});
    CHECK(ops[warmup + 2 * (i - warmup) + 1] == PipeOp{PipeOp::Backward, i - warmup});
  }
}

}  // namespace

TEST_CASE("1F1B: each stage's order matches the definition, also with fewer micro-batches than stages",
          "[pipeline]") {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16})
      for (int s = 0; s < p; ++s) {
        CAPTURE(p, m, s);
        check_1f1b(pipeline_schedule(PipelineSchedule::OneFOneB, s, p, m), s, p, m);
      }
  // The last stage alternates from the start; the first warms up with p − 1 forwards.
  const auto last = pipeline_schedule(PipelineSchedule::OneFOneB, 3, 4, 3);
  CHECK(last == std::vector<PipeOp>{{PipeOp::Forward, 0}, {PipeOp::Backward, 0}, {PipeOp::Forward, 1},
                                    {PipeOp::Backward, 1}, {PipeOp::Forward, 2}, {PipeOp::Backward, 2}});
  const auto first = pipeline_schedule(PipelineSchedule::OneFOneB, 0, 4, 5);
  CHECK(first == std::vector<PipeOp>{{PipeOp::Forward, 0}, {PipeOp::Forward, 1}, {PipeOp::Forward, 2},
                                     {PipeOp::Forward, 3}, {PipeOp::Backward, 0}, {PipeOp::Forward, 4},
                                     {PipeOp::Backward, 1}, {PipeOp::Backward, 2}, {PipeOp::Backward, 3},
                                     {PipeOp::Backward, 4}});
}

TEST_CASE("GPipe: all forwards, then all backwards", "[pipeline]") {
  const auto ops = pipeline_schedule(PipelineSchedule::GPipe, 1, 4, 3);
  CHECK(ops == std::vector<PipeOp>{{PipeOp::Forward, 0}, {PipeOp::Forward, 1}, {PipeOp::Forward, 2},
                                   {PipeOp::Backward, 0}, {PipeOp::Backward, 1}, {PipeOp::Backward, 2}});
}

namespace {

// Runs every rank's interleaved order as the engine does (a send never blocks, a receive waits
// for its pass on the neighbouring virtual stage): every rank finishes, so the order cannot
// deadlock; each (micro-batch, chunk) passes forward once and backward once, after its forward.
void check_interleaved(int p, int m, int v) {
  std::vector<std::vector<PipeOp>> ops;
  for (int r = 0; r < p; ++r) ops.push_back(pipeline_schedule(PipelineSchedule::Interleaved, r, p, m, v));
  const int stages = p * v;
  std::set<std::tuple<int, int, int>> done;  // (kind, micro-batch, virtual stage)
  std::vector<std::size_t> next(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      if (next[r] == ops[r].size()) continue;
      const PipeOp& op = ops[r][next[r]];
      const int s = op.chunk * p + r;  // its virtual stage
      const bool ready = op.kind == PipeOp::Forward
                             ? s == 0 || done.count({PipeOp::Forward, op.micro_batch, s - 1})
                             : done.count({PipeOp::Forward, op.micro_batch, s}) &&
                                   (s == stages - 1 || done.count({PipeOp::Backward, op.micro_batch, s + 1}));
      if (!ready) continue;
      CHECK(done.insert({op.kind, op.micro_batch, s}).second);
      ++next[r], progress = true;
    }
  }
  for (int r = 0; r < p; ++r) CHECK(next[r] == ops[r].size());
  CHECK(done.size() == static_cast<std::size_t>(2 * m * stages));
}

}  // namespace

TEST_CASE("interleaved 1F1B: every rank's order completes, with each pass once", "[pipeline]") {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int groups : {1, 2, 3}) {
        CAPTURE(p, v, groups * p);
        check_interleaved(p, groups * p, v);
      }
  // Megatron-LM's order at p = 2, v = 2, m = 2: rank 0 warms up with (2 − 0 − 1)·2 + (2 − 1)·2 = 4
  // forwards, chunk 0 for both micro-batches first; backwards start on the last chunk.
  using F = PipeOp;
  CHECK(pipeline_schedule(PipelineSchedule::Interleaved, 0, 2, 2, 2) ==
        std::vector<PipeOp>{{F::Forward, 0, 0}, {F::Forward, 1, 0}, {F::Forward, 0, 1}, {F::Forward, 1, 1},
                            {F::Backward, 0, 1}, {F::Backward, 1, 1}, {F::Backward, 0, 0}, {F::Backward, 1, 0}});
  CHECK_THROWS_WITH(pipeline_schedule(PipelineSchedule::Interleaved, 0, 4, 6, 2),
                    Catch::Contains("a step has 6; valid: train.global_batch / (train.micro_batch * dp) a multiple of grid.pp"));
  CHECK(bubble_ratio(4, 8, 2) == Approx(3.0 / 16));
  CHECK(bubble_ratio(4, 8, 1) == Approx(3.0 / 8));
}

TEST_CASE("stage split: auto is as even as possible, explicit lists are checked", "[pipeline]") {
  CHECK(stage_layers({}, 10, 4) == std::vector<int>{3, 3, 2, 2});
  CHECK(stage_layers({}, 4, 4) == std::vector<int>{1, 1, 1, 1});
  CHECK(stage_layers({1, 3}, 4, 2) == std::vector<int>{1, 3});
  CHECK_THROWS_WITH(stage_layers({}, 2, 4), Catch::Contains("4 pipeline stages for 2 layers"));
  CHECK_THROWS_WITH(stage_layers({2, 1}, 4, 2), Catch::Contains("must give 2 counts adding up to 4"));
  CHECK_THROWS_WITH(stage_layers({1, 1, 2}, 4, 2), Catch::Contains("must give 2 counts adding up to 4"));
}

TEST_CASE("grid.stage_layers parses auto or a list of whole counts >= 1", "[pipeline][config]") {
  auto parse = [](const std::string& text) { return parse_config("", "test", {"--grid.stage_layers=" + text}); };
  CHECK(parse("auto").grid.stage_layers.empty());
  CHECK(parse("3,1").grid.stage_layers == std::vector<int>{3, 1});
  CHECK(show_key(parse("3,1"), "grid.stage_layers") == "3,1");
  CHECK_THROWS_WITH(parse("4,0"), Catch::Contains("at least one layer"));
  CHECK_THROWS_WITH(parse("a,b"), Catch::Contains("'a' is not a layer count"));
  for (const char* junk : {"1abc,3xyz", "1.9,3", "1,3,", ",1,3", "0x1,3", "1, 3"}) {
    CAPTURE(junk);
    CHECK_THROWS_WITH(parse(junk), Catch::Contains("valid: auto, or one layer count"));
  }
}

TEST_CASE("zb-h1: 1F1B's passes, backwards split by the ZB-H1 rule, each split one's W once and later", "[pipeline]") {
  for (int p : {2, 3, 4})
    for (int m : {1, 2, 3, 4, 8})
      for (int s = 0; s < p; ++s) {
        CAPTURE(p, m, s);
        const auto ops = pipeline_schedule(PipelineSchedule::ZbH1, s, p, m);
        std::vector<PipeOp> passes;  // the forwards and backwards, unsplit
        std::vector<int> split, weights;
        for (const PipeOp& op : ops) {
          if (op.kind == PipeOp::Weight) {
            CHECK(std::find(split.begin(), split.end(), op.micro_batch) != split.end());  // after its B
            weights.push_back(op.micro_batch);
            continue;
          }
          if (op.split) split.push_back(op.micro_batch);
          passes.push_back({op.kind, op.micro_batch, op.chunk});
        }
        CHECK(passes == pipeline_schedule(PipelineSchedule::OneFOneB, s, p, m));
        CHECK(weights == split);  // oldest first
        const int remaining = m - std::min(p - s - 1, m);
        for (int b = 0; b < m; ++b) {  // steady-state backward b (b < remaining), else a cooldown one
          const bool want = s > 0 && (b >= remaining || b < s || b == remaining - 1);
          CHECK((std::find(split.begin(), split.end(), b) != split.end()) == want);
        }
      }
  // p = 4, m = 8 by the rule: the last stage defers its first 3 Ws and its last to the end;
  // stage 1 its first and last steady-state ones, one W after each cooldown backward.
  using F = PipeOp;
  const auto f = [](int m) { return PipeOp{F::Forward, m}; };
  const auto b = [](int m, bool split = false) { return PipeOp{F::Backward, m, 0, split}; };
  const auto w = [](int m) { return PipeOp{F::Weight, m}; };
  CHECK(pipeline_schedule(PipelineSchedule::ZbH1, 3, 4, 8) ==
        std::vector<PipeOp>{f(0), b(0, true), f(1), b(1, true), f(2), b(2, true), f(3), b(3), f(4), b(4), f(5), b(5),
                            f(6), b(6), f(7), b(7, true), w(0), w(1), w(2), w(7)});
  CHECK(pipeline_schedule(PipelineSchedule::ZbH1, 1, 4, 8) ==
        std::vector<PipeOp>{f(0), f(1), f(2), b(0, true), f(3), b(1), f(4), b(2), f(5), b(3), f(6), b(4), f(7),
                            b(5, true), b(6, true), w(0), b(7, true), w(5), w(6), w(7)});
  // Stage 0 never splits: 1F1B. The last stage holds up to 4 micro-batches (1F1B: 1) until their Ws.
  CHECK(pipeline_schedule(PipelineSchedule::ZbH1, 0, 4, 8) == pipeline_schedule(PipelineSchedule::OneFOneB, 0, 4, 8));
  CHECK(in_flight_micro_batches(PipelineSchedule::ZbH1, 3, 4, 8) == 4);
  CHECK(in_flight_micro_batches(PipelineSchedule::ZbH1, 0, 4, 8) == 4);
  // (p − 1)(F + B − 2W) / (m(F + B + W)): F = B = W leaves none; F = 2, B = 2, W = 1 (w = 1/5) 3·2/(8·5).
  CHECK(zb_h1_bubble_ratio(4, 8, 1.0 / 3) == Approx(0.0).margin(1e-12));
  CHECK(zb_h1_bubble_ratio(4, 8, 0.2) == Approx(6.0 / 40));
  CHECK(zb_h1_bubble_ratio(4, 8, 0.0) == Approx(bubble_ratio(4, 8, 1)));
}
