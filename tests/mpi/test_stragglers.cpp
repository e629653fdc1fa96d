// Per-rank busy time and stragglers (output/stragglers.hpp): synthetic busy times over 4 ranks,
// then a run whose rank 1 is slowed (debug.slow_rank) names it in the log and in metrics.jsonl.
#include <catch2/catch.hpp>

#include <filesystem>

#include "../support/mpi_util.hpp"
#include "../support/training.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/output/stragglers.hpp"

using namespace gridtrain;
using namespace gridtrain::test;
namespace fs = std::filesystem;

TEST_CASE("a rank slower than the others' median at two thermo lines in a row is named once", "[np4]") {
  const auto dir = shared_dir("stragglers");
  const std::string path = dir + "/watch.log";
  Log log(world_rank() == 0, false);
  log.open_file(path);
  Grid grid(MPI_COMM_WORLD, {4, 1, 1}, 60);
  StragglerWatch watch(grid.world(), 1.5, log);
  auto busy = [](int slow, double factor) { return world_rank() == slow ? 10.0 * factor : 10.0 + world_rank(); };
  const RankTimes t = watch.observe(10, busy(2, 3.0));
  CHECK(t.slowest == 2);
  CHECK(t.max_ms == 30.0);
  CHECK(t.min_ms == 10.0);
  CHECK(t.mean_ms == Approx((10.0 + 11.0 + 30.0 + 13.0) / 4));
  CHECK(t.median_ms == 11.0);  // of 10, 11, 13
  CHECK(read_on_root(path, MPI_COMM_WORLD).find("Straggler") == std::string::npos);  // one line is no pattern
  watch.observe(20, busy(2, 3.0));
  watch.observe(30, busy(2, 3.0));
  watch.observe(40, busy(2, 1.2));  // within the factor: the streak ends
  watch.observe(50, busy(3, 2.0));
  const std::string text = read_on_root(path, MPI_COMM_WORLD);
  CAPTURE(text);
  CHECK(text.find("Straggler: rank 2 on ") != std::string::npos);
  CHECK(text.find("at the thermo lines of steps 10 to 20") != std::string::npos);
  CHECK(text.find("Straggler:", text.find("Straggler:") + 1) == std::string::npos);  // once per streak
  CHECK(text.find("rank 3") == std::string::npos);  // one line of rank 3 only
}

TEST_CASE("debug.slow_rank is found by the busy times and named", "[np4]") {
  const auto dir = shared_dir("slow-rank");
  Config c = tiny(dir, 6, 8);
  c.grid.dp = 4;
  c.output.thermo = 1;
  c.debug.slow_rank = 1;
  c.debug.slow_s = 0.05;
  if (world_rank() == 0) fs::create_directories(c.output.dir);
  Log log(world_rank() == 0, false);
  log.open_file(dir + "/run.log");
  Trainer(c, MPI_COMM_WORLD, log, 1.0).run();
  const std::string text = read_on_root(dir + "/run.log", MPI_COMM_WORLD);
  CAPTURE(text);
  CHECK(text.find("Straggler: rank 1 on ") != std::string::npos);
  const std::string metrics = read_on_root(c.output.dir + "/metrics.jsonl", MPI_COMM_WORLD);
  CHECK(metrics.find("\"slowest_rank\": 1") != std::string::npos);
}
