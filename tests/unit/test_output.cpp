// The reports' arithmetic on synthetic inputs: the Timer's sections and residual, LAMMPS'
// %varavg, the breakdown reduced over ranks, min/avg/max, metrics.jsonl on resume, and the
// agreement of ranks on a failure (one rank here: MPI_COMM_SELF).
#include <catch2/catch.hpp>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "../support/corpus.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/output/rank_stats.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/timer.hpp"

using namespace gridtrain;

namespace {

double g_now = 0;  // the synthetic clock's reading, seconds
double synthetic_clock() { return g_now; }

// A loop of 6.75 s: Data 1, Compute 3 (1.25 of it waiting on tp), an unowned 0.5, DpComm 2,
// then 0.25 after the last stamp.
Timer synthetic_loop() {
  g_now = 100.0;
  Timer t(synthetic_clock);
  t.reset();
  g_now += 1.0, t.stamp(Section::Data);
  g_now += 3.0, t.stamp(Section::Compute);
  g_now += 0.5, t.stamp();
  g_now += 2.0, t.stamp(Section::DpComm);
  t.move(Section::Compute, Section::TpComm, 1.25);
  g_now += 0.25;
  return t;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

ThermoRow row(long long step) {
  return {.step = step, .loss = 2.0, .lr = 1e-3, .grad_norm = 0.5, .items_per_s = 1000.0, .step_ms = 10.0, .mfu = 0.1,
          .comm_bytes = 64};
}

}  // namespace

TEST_CASE("Timer: each interval goes to the section stamped; Other is the residual", "[timer]") {
  Timer t = synthetic_loop();
  CHECK(t.seconds(Section::Data) == 1.0);
  CHECK(t.seconds(Section::Compute) == 1.75);
  CHECK(t.seconds(Section::TpComm) == 1.25);
  CHECK(t.seconds(Section::DpComm) == 2.0);
  CHECK(t.seconds(Section::Optim) == 0.0);
  CHECK(t.loop_seconds() == 6.75);
  CHECK(t.other(t.loop_seconds()) == Approx(0.75));  // the unowned 0.5 and the 0.25 after the last stamp
  t.move(Section::Data, Section::PpComm, 5.0);       // clamped to what Data holds
  CHECK(t.seconds(Section::Data) == 0.0);
  CHECK(t.seconds(Section::PpComm) == 1.0);
}

TEST_CASE("section_stats: LAMMPS' %varavg = 100 sqrt(<t^2>/<t> - <t>)", "[timer]") {
  // Three ranks spent 1, 2 and 3 s: <t> = 2, <t^2> = 14/3, 14/6 - 2 = 1/3.
  const auto s = section_stats("Compute", 1.0, 3.0, 6.0, 14.0, 3, 10.0);
  CHECK(s.avg_s == 2.0);
  CHECK(s.min_s == 1.0);
  CHECK(s.max_s == 3.0);
  CHECK(s.varavg_pct == Approx(100.0 * std::sqrt(1.0 / 3.0)));
  CHECK(s.total_pct == Approx(20.0));
  CHECK(section_stats("Data", 1.0, 1.0, 3.0, 3.0, 3, 10.0).varavg_pct == 0.0);      // balanced
  CHECK(section_stats("Data", 0.0, 0.002, 0.002, 4e-6, 3, 10.0).varavg_pct == 0.0);  // below 1 ms: not judged
}

TEST_CASE("reduce_breakdown: rows, the residual and the table over ranks", "[timer]") {
  Timer t = synthetic_loop();
  Axis self("self", MPI_COMM_SELF);
  const Breakdown b = reduce_breakdown(t, t.loop_seconds(), self);
  REQUIRE(b.rows.size() == kSectionCount);
  CHECK(b.rows[static_cast<std::size_t>(Section::Compute)].avg_s == 1.75);
  CHECK(b.rows[static_cast<std::size_t>(Section::TpComm)].name == "TP comm");
  CHECK(b.rows[static_cast<std::size_t>(Section::DpComm)].total_pct == Approx(100.0 * 2.0 / 6.75));
  CHECK(b.other_avg_s == Approx(0.75));
  CHECK(b.loop_avg_s == 6.75);
  const std::string table = format_breakdown(b.rows, b.other_avg_s, b.loop_avg_s);
  CHECK_THAT(table, Catch::Contains("MPI task timing breakdown") && Catch::Contains("PP comm ") &&
                        Catch::Contains("Other   |            | 0.75       |            |       | 11.11"));
}

TEST_CASE("min_avg_max formats the reduction in the unit asked for", "[output]") {
  Axis self("self", MPI_COMM_SELF);
  CHECK(min_avg_max(3.0 * 1024 * 1024, self, 1024.0 * 1024.0, "MiB") == "min/avg/max over 1 ranks: 3.0 / 3.0 / 3.0 MiB");
  CHECK(min_avg_max(12.0, self) == "min/avg/max over 1 ranks: 12.0 / 12.0 / 12.0");
}

TEST_CASE("Thermo: metrics.jsonl holds one line per step; a resume keeps the lines up to its step", "[output]") {
  const std::string path = test::temp_dir("thermo") + "/metrics.jsonl";
  Log quiet(true);
  {
    Thermo fresh(quiet, path, 0);
    for (long long s = 1; s <= 4; ++s) fresh.write(row(s));
  }
  auto lines = lines_of(path);
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[2], Catch::StartsWith("{\"step\": 3,") && Catch::Contains("\"loss\": 2"));
  {
    Thermo resumed(quiet, path, 2);  // resumed from the checkpoint of step 2: lines 3 and 4 go
    resumed.write(row(3));
  }
  lines = lines_of(path);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[1], Catch::StartsWith("{\"step\": 2,"));
  CHECK_THAT(lines[2], Catch::StartsWith("{\"step\": 3,"));
}

TEST_CASE("Thermo: a blend's datasets get validation columns, metrics.jsonl keys and TensorBoard tags", "[output]") {
  const std::string dir = test::temp_dir("thermo-blend");
  Log quiet(true);
  {
    Thermo t(quiet, dir + "/metrics.jsonl", 0, "token", false, dir, {"data/a", "b\"c"});
    t.write(row(1));
    ThermoRow r = row(2);
    r.val_loss = 1.5, r.val_datasets = {1.25, 2.0};
    t.write(r);
  }
  const auto lines = lines_of(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], !Catch::Contains("val_loss"));
  CHECK_THAT(lines[1], Catch::Contains("\"val_loss\": 1.5, \"val_loss/data/a\": 1.25, \"val_loss/b\\\"c\": 2,"));
}

TEST_CASE("agree: a phase that throws becomes one Error; the OS error travels with it", "[error]") {
  CHECK_NOTHROW(agree(MPI_COMM_SELF, [] {}));
  CHECK_THROWS_WITH(agree(MPI_COMM_SELF, [] { throw std::runtime_error("disk on fire"); }), "disk on fire");
  const auto f = agree_on(MPI_COMM_SELF, [] {
    errno = ENOSPC;
    throw io_error("cannot write x.h5");
  });
  REQUIRE(f.has_value());
  CHECK(f->rank == 0);
  CHECK(f->failed_ranks == 1);
  CHECK_THAT(f->message, Catch::Contains("cannot write x.h5") && Catch::Contains("No space left on device"));
  CHECK_FALSE(agree_on(MPI_COMM_SELF, [] {}).has_value());
}
