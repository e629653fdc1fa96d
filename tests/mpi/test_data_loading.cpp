// Per-rank reads (data/token_data.hpp, data/windows.hpp) in whole training runs: the loader
// thread gives the same batches as loading on the step loop's thread, and a corpus cut into
// shards trains as the same tokens in one file. Run under mpiexec -n 2.
#include <catch2/catch.hpp>

#include "../support/corpus.hpp"
#include "../support/training.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

namespace {

RunResult run(const Config& c) {
  Log quiet(false);
  return Trainer(c, MPI_COMM_WORLD, quiet, 1.0).run();
}

}  // namespace

TEST_CASE("batches read ahead on the loader thread train bit for bit as batches read when needed", "[np2]") {
  const auto dir = shared_dir("prefetch");
  Config c = tiny(dir, 12, 8);
  c.data.prefetch = 0;
  const auto want = run(c);
  for (int depth : {1, 4}) {
    CAPTURE(depth);
    c.data.prefetch = depth;
    CHECK(run(c).losses == want.losses);
  }
}

TEST_CASE("a corpus in 3 shards trains bit for bit as the same tokens in one file", "[np2]") {
  const auto dir = shared_dir("sharded");
  Config c = tiny(dir, 12, 8);
  c.train.eval_interval = 4;
  const auto want = run(c);
  if (world_rank() == 0) shard_corpus(c.data.path, dir + "/shards", 3);
  MPI_Barrier(MPI_COMM_WORLD);
  c.data.path = dir + "/shards";
  const auto got = run(c);
  CHECK(got.losses == want.losses);
  REQUIRE(got.final_val_loss);
  CHECK(*got.final_val_loss == *want.final_val_loss);
}
