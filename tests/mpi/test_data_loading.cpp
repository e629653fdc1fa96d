// Per-rank reads (data/token_data.hpp, data/batches.hpp) in whole training runs: the loader
// thread gives the same batches as loading on the step loop's thread, and a corpus cut into
// shards trains as the same tokens in one file, and `prepare` on several ranks writes shards
// that read as its one-file output. Run under mpiexec -n 2.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "../support/corpus.hpp"
#include "../support/training.hpp"
#include "gridtrain/data/prepare.hpp"

using namespace gridtrain;
using namespace gridtrain::test;

TEST_CASE("batches read ahead on the loader thread train bit for bit as batches read when needed", "[np2]") {
  const auto dir = shared_dir("prefetch");
  Config c = tiny(dir, 12, 8);
  c.data.prefetch = 0;
  const auto want = quiet_run(c);
  for (int depth : {1, 4}) {
    CAPTURE(depth);
    c.data.prefetch = depth;
    CHECK(quiet_run(c).losses == want.losses);
  }
}

TEST_CASE("a corpus in 3 shards trains bit for bit as the same tokens in one file", "[np2]") {
  const auto dir = shared_dir("sharded");
  Config c = tiny(dir, 12, 8);
  c.train.eval_interval = 4;
  const auto want = quiet_run(c);
  if (world_rank() == 0) shard_corpus(c.data.path, dir + "/shards", 3);
  MPI_Barrier(MPI_COMM_WORLD);
  c.data.path = dir + "/shards";
  const auto got = quiet_run(c);
  CHECK(got.losses == want.losses);
  REQUIRE(got.final_val_loss);
  CHECK(*got.final_val_loss == *want.final_val_loss);
}

TEST_CASE("prepare on 2 ranks writes 5 shards that read as the one-file corpus", "[np2]") {
  const auto dir = shared_dir("prepare-mpi");
  const std::string text = dir + "/corpus.txt";  // written by shared_dir with corpus.h5 from it
  const auto r = prepare_text(sharded({text, dir + "/shards"}, std::filesystem::file_size(text) / 5 + 1), MPI_COMM_WORLD);
  CHECK(r.shards == 5);
  const auto one = load_tokens(dir + "/corpus.h5", MPI_COMM_WORLD, 2, "");
  const auto cut = load_tokens(dir + "/shards", MPI_COMM_WORLD, 2, "");
  CHECK(cut.files.size() == 5);
  CHECK(read_all(cut.train) == read_all(one.train));
  CHECK(read_all(cut.val) == read_all(one.val));
  CHECK(cut.sha256 == r.sha256);
}

TEST_CASE("SentencePiece prepare on 2 ranks gives the tokens of 1 rank (cut after newlines)", "[np2]") {
  const auto dir = shared_dir("prepare-sp-mpi");
  const std::string text = dir + "/corpus.txt";
  auto o = sharded({text, dir + "/one.h5"}, 0);
  o.tokenizer = "sentencepiece";
  o.vocab_size = 300;
  if (world_rank() == 0) {  // a model, trained once, in a file
    prepare_text(o, MPI_COMM_SELF);
    const auto d = load_tokens(dir + "/one.h5", MPI_COMM_SELF, 2, "");
    std::ofstream(dir + "/sp.model", std::ios::binary) << d.tokenizer_model;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  o.sp_model = dir + "/sp.model";
  o.output = dir + "/two";
  o.shard_size = 1500;  // several shards, written by both ranks
  prepare_text(o, MPI_COMM_WORLD);
  const auto one = load_tokens(dir + "/one.h5", MPI_COMM_WORLD, 2, "");
  const auto two = load_tokens(dir + "/two", MPI_COMM_WORLD, 2, "");
  CHECK(two.files.size() > 2);
  CHECK(two.tokenizer_model == one.tokenizer_model);
  CHECK(read_all(two.train) == read_all(one.train));
  CHECK(read_all(two.val) == read_all(one.val));
}
