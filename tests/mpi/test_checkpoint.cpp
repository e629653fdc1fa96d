// Checkpoints under MPI: bit-exact resume, dp resharding, empty selections, async == sync, and
// clear errors for bad files.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../support/corpus.hpp"
#include "../support/errors.hpp"
#include "../support/mpi_util.hpp"
#include "../support/training.hpp"
#include "gridtrain/app/trainer.hpp"
#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;
using namespace gridtrain::test;
namespace fs = std::filesystem;

namespace {

std::string load_error(const Config& c, MPI_Comm comm) {
  return test::error_of([&] { QuietTrainer t(c, comm); });
}

}  // namespace

TEST_CASE("resume is bit-exact, inside the warmup and at its end", "[np2]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("resume-" + family);
  for (int k : {2, 4}) {
    CAPTURE(k);
    check_resume(dir + "/ckpt-" + std::to_string(k), [&](int steps) { return as_family(tiny(dir, steps, 4), family); }, k,
                 8);
  }
}

TEST_CASE("resume is bit-exact with the interleaved schedule and with sequence parallelism", "[np4]") {
  const auto family = GENERATE(from_range(kLanguageModels));
  CAPTURE(family);
  const auto dir = shared_dir("resume-interleaved-" + family);
  check_resume(dir + "/ckpt", [&](int steps) {
    Config c = tiny(dir, steps, 8);
    c.model.n_layer = 4;
    c.model.n_head = 4;
    c = as_family(c, family);
    c.grid.tp = c.grid.pp = 2;
    c.grid.sequence_parallel = true;
    c.train.schedule = PipelineSchedule::Interleaved;
    c.grid.virtual_stages = 2;
    return c;
  }, 3, 6);
}

TEST_CASE("resume with 1-bit Adam after its freeze is bit-exact (error feedback restored)", "[np2]") {
  const auto dir = shared_dir("resume-onebit");
  check_resume(dir + "/ckpt", [&](int steps) {
    Config c = tiny(dir, steps, 4);
    c.optim.type = OptimizerType::OnebitAdam;
    c.optim.freeze_step = 2;
    return c;
  }, 5, 8);
}

TEST_CASE("a checkpoint saved at dp = 4 loads at dp = 2 and dp = 1 and training continues", "[np4]") {
  const auto dir = shared_dir("reshard");
  Config c = tiny(dir, 3, 8);
  c.checkpoint.dir = dir + "/ckpt";
  QuietTrainer dp4(c);
  dp4.run();
  const auto saved = snapshot(dp4);
  const std::string path = dir + "/ckpt/step-00000003.h5";

  c.train.steps = 5;
  c.checkpoint.resume = {Resume::Mode::Path, path};
  c.checkpoint.dir = "none";
  const int rank = world_rank();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, rank, &half);
  if (rank < 2) {
    QuietTrainer dp2(c, half);
    CHECK(dp2.grid().shape().dp == 2);
    CHECK(dp2.start_step() == 3);
    CHECK(bitwise_equal(snapshot(dp2), saved));
    const auto r = dp2.run();
    CHECK(r.losses.size() == 2);
  }
  MPI_Comm_free(&half);
  if (rank == 0) {
    QuietTrainer dp1(c, MPI_COMM_SELF);
    CHECK(bitwise_equal(snapshot(dp1), saved));
    CHECK(dp1.optimizer().steps() == 3);
    CHECK(dp1.run().losses.size() == 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("collective writes where some ranks own nothing read back exactly", "[np4]") {
  const int rank = world_rank();
  const std::string path = test::bcast(rank == 0 ? test::temp_dir("slabs") + "/slabs.h5" : "", MPI_COMM_WORLD);
  const std::vector<hsize_t> shape{5, 3};
  std::vector<float> all(15);
  for (int i = 0; i < 15; ++i) all[i] = 0.5f * i - 3.0f;
  // Rows split 2/2/1/0: rank 3 owns nothing of "split"; only rank 2 owns "single".
  const hsize_t first[] = {0, 2, 4, 5}, rows[] = {2, 2, 1, 0};
  const Slab mine = rows[rank] ? Slab{{first[rank], 0}, {rows[rank], 3}} : Slab::none();
  {
    auto f = CheckpointFile::create(path, MPI_COMM_WORLD);
    f.write("/a/split", DType::F32, shape, mine, all.data() + first[rank] * 3);
    f.write("/b/single", DType::F32, shape, rank == 2 ? Slab::all(shape) : Slab::none(), all.data());
    f.close();
  }
  auto f = CheckpointFile::open(path, MPI_COMM_WORLD);
  for (const char* name : {"/a/split", "/b/single"}) {
    std::vector<float> back(15, -1.0f);
    f.read(name, DType::F32, shape, Slab::all(shape), back.data());
    CHECK(back == all);
  }
  std::vector<float> part(15, -1.0f);  // partitioned read: each rank its rows
  f.read("/a/split", DType::F32, shape, mine, part.data());
  CHECK(std::equal(part.begin(), part.begin() + rows[rank] * 3, all.begin() + first[rank] * 3));
}

TEST_CASE("async save writes the same file as sync save", "[np2]") {
  const auto dir = shared_dir("async");
  for (bool async : {false, true}) {
    Config c = tiny(dir, 3, 4);
    c.checkpoint.dir = dir + (async ? "/async" : "/sync");
    c.checkpoint.async = async;
    c.checkpoint.interval = 1;
    c.checkpoint.keep_last = 2;
    quiet_run(c);
  }
  if (world_rank() == 0) {
    for (const char* sub : {"/sync", "/async"}) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(dir + sub)) files.push_back(e.path().filename().string());
      std::sort(files.begin(), files.end());
      CHECK(files == std::vector<std::string>{"latest", "step-00000002.h5", "step-00000003.h5"});  // keep_last
      std::ifstream latest(dir + sub + "/latest");
      std::string name;
      latest >> name;
      CHECK(name == "step-00000003.h5");
    }
    auto a = CheckpointFile::open(dir + "/sync/step-00000003.h5", MPI_COMM_SELF);
    auto b = CheckpointFile::open(dir + "/async/step-00000003.h5", MPI_COMM_SELF);
    for (std::string name : {"/model/wte.weight", "/model/h.1.mlp.c_fc.weight", "/optim/ln_f.bias/exp_avg_sq"}) {
      CAPTURE(name);
      const auto shape = a.shape_of(name);
      REQUIRE(shape == b.shape_of(name));
      std::vector<float> x(Slab::all(shape).elements()), y(x.size());
      a.read(name, DType::F32, shape, Slab::all(shape), x.data());
      b.read(name, DType::F32, shape, Slab::all(shape), y.data());
      CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("bad checkpoints give clear errors on every rank", "[np2]") {
  const auto dir = shared_dir("badckpt");
  Config c = tiny(dir, 2, 4);
  c.checkpoint.dir = dir + "/ckpt";
  quiet_run(c);
  const std::string good = dir + "/ckpt/step-00000002.h5";

  c.checkpoint.dir = "none";
  c.checkpoint.resume = {Resume::Mode::Path, dir + "/nope.h5"};
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("nope.h5': file not found"));

  c.checkpoint.resume = {Resume::Mode::Path, good};
  c.model.n_embd = 32;  // the deck changes the model's shape: the key is named before any tensor
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("model.n_embd = 16 in the checkpoint, 32 in this run") &&
                                                Catch::Contains("--model.n_embd=16"));
  c.model.n_embd = 16;
  c.optim.type = OptimizerType::Sgd;
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("optimizer 'adamw' but optim.type = 'sgd'"));
  c.optim.type = OptimizerType::AdamW;

  if (world_rank() == 0) {
    fs::copy_file(good, dir + "/truncated.h5");
    fs::resize_file(dir + "/truncated.h5", fs::file_size(good) / 2);
    fs::copy_file(good, dir + "/flipped.h5");
    haddr_t offset = 0;  // raw data of /model/wte.weight (contiguous layout)
    {
      H5Id h(H5Fopen(good.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open");
      H5Id ds(H5Dopen2(h, "/model/wte.weight", H5P_DEFAULT), "open wte");
      offset = H5Dget_offset(ds);
    }
    // Overwrite a few weights; the file stays valid HDF5.
    std::fstream f(dir + "/flipped.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + 64));
    f.write("\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", 8);
    f.close();
    fs::copy_file(good, dir + "/v2.h5");
    H5Id h(H5Fopen((dir + "/v2.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open");
    H5Adelete(h, "version");
    h5_write_attr(h, "version", 2LL);
    fs::copy_file(good, dir + "/fisher-yates.h5");  // as written before the sample order was recorded
    H5Id old(H5Fopen((dir + "/fisher-yates.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open");
    H5Adelete(H5Id(H5Gopen2(old, "/data", H5P_DEFAULT), "open /data"), "sampler");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  c.checkpoint.resume = {Resume::Mode::Path, dir + "/truncated.h5"};
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("truncated.h5'"));
  c.checkpoint.resume = {Resume::Mode::Path, dir + "/flipped.h5"};
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("fails its checksum"));
  c.checkpoint.resume = {Resume::Mode::Path, dir + "/v2.h5"};
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("format version 2; this gridtrain reads version 1"));
  c.checkpoint.resume = {Resume::Mode::Path, dir + "/fisher-yates.h5"};
  CHECK_THAT(load_error(c, MPI_COMM_WORLD), Catch::Contains("sample order fisher-yates then, feistel now") &&
                                                Catch::Contains("data.allow_change = true"));
}

// A llama whose norm epsilon and rotary base are not the deck's: its weights compute another
// function there. Starting from it (checkpoint.init_from) or resuming it with a deck that leaves
// those keys at their defaults is refused, every differing key named with both values, the n_kv_head
// and ffn_hidden rules compared as resolved; the checkpoint's values load.
TEST_CASE("a checkpoint is loaded only by a deck that computes its model", "[np2]") {
  const auto dir = shared_dir("model-keys");
  Config c = as_family(tiny(dir, 2, 4), "llama");
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 500000;
  c.model.n_kv_head = 0;  // = n_head
  c.checkpoint.dir = dir + "/ckpt";
  quiet_run(c);
  const std::string saved = dir + "/ckpt/step-00000002.h5";
  Config deck = as_family(tiny(dir, 2, 4), "llama");  // the shape keys only
  deck.model.n_kv_head = c.model.n_head;
  for (const bool init : {true, false}) {
    CAPTURE(init);
    Config run = deck;
    if (init) run.checkpoint.init_from = saved;
    else run.checkpoint.resume = {Resume::Mode::Path, saved};
    CHECK_THAT(load_error(run, MPI_COMM_WORLD),
               Catch::Contains("was written for another model than this run's deck describes (") &&
                   Catch::Contains("model.norm_eps = 1e-06 in the checkpoint, 1e-05 in this run; model.rope_theta = "
                                   "500000 in the checkpoint, 10000 in this run)") &&
                   Catch::Contains("--model.norm_eps=1e-06 --model.rope_theta=500000") &&
                   !Catch::Contains("n_kv_head"));
    run.model.norm_eps = 1e-6;
    run.model.rope_theta = 500000;
    CHECK(load_error(run, MPI_COMM_WORLD).empty());
  }
  Config gpt = tiny(dir, 2, 4);
  gpt.checkpoint.init_from = saved;
  CHECK_THAT(load_error(gpt, MPI_COMM_WORLD), Catch::Contains("model.type = llama in the checkpoint, gpt in this run") &&
                                                  !Catch::Contains("n_layer"));
}
