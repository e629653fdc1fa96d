// The local checkpoint levels under MPI (checkpoint.local_interval; checkpoint/local_part.hpp):
// two simulated nodes of 2 ranks (checkpoint.ranks_per_node = 2, partners r and r + 2). A run
// that "failed" after local step 4, whose checkpoint.dir has step 2 only, resumes bit for bit
// from its own copies, from a lost node's partner copies, from the partner copy of a part that
// fails its checksum, and from the file system when a part is at no level; another run's parts
// are never adopted.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "../support/mpi_util.hpp"
#include "../support/training.hpp"
#include "gridtrain/checkpoint/local_part.hpp"
#include "gridtrain/util/log.hpp"

using namespace gridtrain;
using namespace gridtrain::test;
namespace fs = std::filesystem;

namespace {

constexpr int kStop = 4, kTotal = 8;

// The run of the tests at (dp, tp) with ZeRO `stage`: local steps every 2, checkpoint.dir every 2,
// written in the background at stage 1.
Config local_run(const std::string& dir, const std::string& name, int steps, int dp, int tp, int stage) {
  Config c = tiny(dir, steps, 8);
  c.grid.dp = dp;
  c.grid.tp = tp;
  c.optim.zero_stage = stage;
  c.checkpoint.dir = dir + "/" + name + "/ck";
  c.checkpoint.local_dir = dir + "/" + name + "/local";
  c.checkpoint.local_interval = 2;
  c.checkpoint.interval = 2;
  c.checkpoint.ranks_per_node = 2;
  c.output.dir = dir + "/" + name + "/out";
  c.checkpoint.async = stage == 1;  // the writer thread's own communicator for the partner exchange
  return c;
}

// The directory of local step `step` of `name`'s one run, and its files (for rank 0 to change).
fs::path step_dir(const std::string& dir, const std::string& name, long long step) {
  const fs::path local = dir + "/" + name + "/local";
  const fs::path run = fs::directory_iterator(local)->path();  // the failed run's only run-<id>
  return local_step_dir(local, run.filename().string().substr(4), step);
}
std::vector<fs::path> parts(const std::string& dir, const std::string& name, long long step) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(step_dir(dir, name, step))) out.push_back(f.path());
  return out;
}

// A Trainer of c whose log (rank 0's) is kept in a file, returned by log_text().
struct LoggedRun {
  explicit LoggedRun(const Config& c) : path(c.output.dir + ".log") {
    if (world_rank() == 0) fs::create_directories(c.output.dir);  // as `gridtrain` makes it, for metrics.jsonl
    log.open_file(path);
    trainer = std::make_unique<Trainer>(c, MPI_COMM_WORLD, log, 1.0);
  }
  std::string log_text() const { return read_on_root(path, MPI_COMM_WORLD); }
  std::string path;
  Log log{world_rank() == 0, false};
  std::unique_ptr<Trainer> trainer;
};

}  // namespace

TEST_CASE("a failed run resumes from the local levels bit for bit: own, partner, checksum fallback, file system", "[np4]") {
  const auto [dp, tp, stage] = GENERATE(std::make_tuple(4, 1, 3), std::make_tuple(2, 2, 1));
  CAPTURE(dp, tp, stage);
  const auto dir = shared_dir("local-levels-" + std::to_string(dp) + "-" + std::to_string(stage));
  Config whole = local_run(dir, "straight", kTotal, dp, tp, stage);
  whole.checkpoint.dir = "none";
  whole.checkpoint.local_interval = 0;
  QuietTrainer straight(whole);
  const RunResult full = straight.run();
  // Each case: the failed run (local steps 2 and 4 written, checkpoint.dir's step 4 lost: the
  // failure hit before that file was complete, so checkpoint.dir continues from step 2), whose
  // files `damage` (rank 0) then changes, resumed.
  auto resume = [&](const std::string& name, const std::function<void()>& damage, long long from, const std::string& says) {
    CAPTURE(name);
    quiet_run(local_run(dir, name, kStop, dp, tp, stage));
    if (world_rank() == 0) {
      fs::remove(dir + "/" + name + "/ck/step-00000004.h5");
      damage();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    LoggedRun run(resuming(local_run(dir, name, kTotal, dp, tp, stage), dir + "/" + name + "/ck"));
    const std::string log = run.log_text();
    CAPTURE(log);
    REQUIRE(run.trainer->start_step() == from);
    CHECK(log.find(says) != std::string::npos);
    const RunResult rest = run.trainer->run();
    REQUIRE(rest.losses.size() == static_cast<std::size_t>(kTotal - from));
    for (long long s = from; s < kTotal; ++s)
      CHECK(rest.losses[static_cast<std::size_t>(s - from)] == full.losses[static_cast<std::size_t>(s)]);
    CHECK(bitwise_equal(snapshot(*run.trainer), snapshot(straight)));
  };
  auto remove_held_by = [&](const std::string& name, std::set<int> holders) {
    for (long long step : {2, 4})
      for (const auto& p : parts(dir, name, step))
        if (holders.contains(part_ranks(p).second)) fs::remove(p);
  };
  resume("own", [] {}, kStop, "ranks 0-3 from their own copies; newer than");
  // The second node lost: ranks 2 and 3 from the copies ranks 0 and 1 hold.
  resume("partner", [&] { remove_held_by("partner", {2, 3}); }, kStop,
         "ranks 0-1 from their own copies, rank 2 from its partner copy (held by rank 0), rank 3 from its partner copy (held by rank 1)");
  // One byte of rank 1's own copy flipped: its checksum fails, the partner's copy is taken.
  resume("checksum", [&] {
    std::fstream f(step_dir(dir, "checksum", 4) / part_name(1, 1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-20, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x10);
    f.seekp(-20, std::ios::end);
    f.put(c);
  }, kStop, "rank 1 from its partner copy (held by rank 3)");
  // Rank 1's part lost at both levels of step 4 (its node and its partner's): step 4 is at no
  // level, step 2 is no newer than checkpoint.dir's: the file system's step 2.
  resume("file-system", [&] {
    for (const auto& p : parts(dir, "file-system", 4))
      if (part_ranks(p).first == 1) fs::remove(p);
  }, 2, "local step 4: rank 1's part is at no level (no copy found); falling back to the file system");
}

TEST_CASE("local parts of another run or another grid are never adopted", "[np4]") {
  const auto dir = shared_dir("local-foreign");
  quiet_run(local_run(dir, "other", kStop, 4, 1, 0));  // a run of another checkpoint.dir into the same local_dir
  Config mine = local_run(dir, "mine", kStop, 4, 1, 0);
  mine.checkpoint.local_dir = dir + "/other/local";
  quiet_run(mine);
  if (world_rank() == 0) fs::remove(dir + "/mine/ck/step-00000004.h5");
  MPI_Barrier(MPI_COMM_WORLD);
  // Resumed at another grid: its own local step 4 does not fit, and says so; checkpoint.dir's step 2 is taken.
  Config resumed = resuming(local_run(dir, "mine", kStop + 1, 2, 2, 0), dir + "/mine/ck");
  resumed.checkpoint.local_dir = dir + "/other/local";
  LoggedRun run(resumed);
  const std::string log = run.log_text();
  CAPTURE(log);
  CHECK(run.trainer->start_step() == 2);
  CHECK(log.find("skipped other runs' local parts: run ") != std::string::npos);
  CHECK(log.find("local step 4: every part written for another grid, model, optimizer or corpus") != std::string::npos);
  CHECK(log.find("Resume: " + dir + "/mine/ck/step-00000002.h5") != std::string::npos);
}
