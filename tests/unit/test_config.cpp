#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "../support/errors.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/config/data_blend.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;

namespace {
// The message of the Error parse_config throws, or "" when it accepts the input.
std::string problems(const std::string& deck, const std::vector<std::string>& cli = {}) {
  return test::error_of([&] { parse_config(deck, "in.test", cli); });
}
}  // namespace

TEST_CASE("defaults parse and the CLI overrides the deck", "[config]") {
  const auto c = parse_config("[train]\nsteps = 7\nmicro_batch = 4\nglobal_batch = 8\n", "in.test",
                              {"--train.steps=9", "--model.n_layer", "3"});
  CHECK(c.train.steps == 9);
  CHECK(c.model.n_layer == 3);
  CHECK(c.train.micro_batch == 4);
  CHECK(c.grid.dp == 0);
  CHECK(c.optim.type == OptimizerType::AdamW);
}

TEST_CASE("each kind of bad key or value gives its own message", "[config]") {
  CHECK_THAT(problems("[train]\nstepz = 3\n"),
             Catch::Contains("unknown key 'train.stepz'") && Catch::Contains("did you mean 'train.steps'"));
  CHECK_THAT(problems("[train]\nsteps = many\n"), Catch::Contains("train.steps = 'many': not an integer"));
  CHECK_THAT(problems("[train]\nsteps = 0\n"), Catch::Contains("out of range; valid: integer >= 1"));
  CHECK_THAT(problems("[optim]\nlr = -1\n"), Catch::Contains("optim.lr = '-1': out of range; valid: number > 0"));
  CHECK_THAT(problems("[optim]\ntype = adam\n"), Catch::Contains("valid: one of adamw sgd"));
  CHECK_THAT(problems("[grid]\ndp = two\n"), Catch::Contains("valid: auto or integer >= 1"));
  CHECK_THAT(problems("[model]\nn_embd = 100\nn_head = 3\n"), Catch::Contains("not divisible by model.n_head"));
  CHECK_THAT(problems("[train]\nmicro_batch = 3\nglobal_batch = 8\n"), Catch::Contains("not a multiple of train.micro_batch"));
  CHECK_THAT(problems("this is not ini\n"), Catch::Contains("deck in.test"));
  CHECK_THAT(problems("[train]\nsteps = 1\nsteps = 2\n"), Catch::Contains("given more than once"));
  CHECK_THAT(problems("", {"--optim.bogus=1"}), Catch::Contains("command line: unknown key 'optim.bogus'"));
  CHECK_THAT(problems("", {"stray"}), Catch::Contains("unexpected argument 'stray'"));
  CHECK_THAT(problems("[comm]\nbackend = nccl\n[train]\ndevice = cpu\n"),
             Catch::Contains("comm.backend = nccl moves device buffers, but train.device = cpu"));
  CHECK_THAT(problems("[comm]\nbackend = mpi\n[train]\ndevice = cuda\n"), Catch::Contains("CUDA-aware MPI"));
  CHECK_THAT(problems("[comm]\nbackend = gloo\n"), Catch::Contains("valid: one of auto mpi nccl"));
  CHECK(problems("[comm]\nbackend = nccl\n[train]\ndevice = cuda\n").empty());
  CHECK_THAT(problems("[precision]\ninit_scale = 1\nmin_scale = 1000\n"), Catch::Contains("valid: min_scale <= init_scale"));
  CHECK_THAT(problems("[precision]\ninit_scale = 1e300\n"), Catch::Contains("precision.init_scale = '1e300': out of range"));
  CHECK_THAT(problems("[optim]\nzero_stage = 4\n"), Catch::Contains("optim.zero_stage = '4': out of range"));
  CHECK_THAT(problems("[optim]\nzero_stage = 1\ntype = onebit_adam\n"),
             Catch::Contains("optim.zero_stage = 1 with optim.type = onebit_adam"));
  CHECK_THAT(problems("[optim]\nzero_stage = 2\n[comm]\ncompression = fp16\n"),
             Catch::Contains("comm.compression = fp16 compresses allreduces only"));
  CHECK(problems("[optim]\nzero_stage = 2\n").empty());
}

TEST_CASE("ZeRO stage 3 refuses the out-of-memory backoff on dp > 1", "[config]") {
  const Config c = parse_config("[optim]\nzero_stage = 3\n[train]\non_oom = backoff\n", "deck", {});
  CHECK_THROWS_WITH(plan_launch(c, 2, false), Catch::Contains("train.on_oom = backoff with optim.zero_stage = 3"));
  CHECK_NOTHROW(plan_launch(c, 1, false));  // dp = 1: nothing is sharded
}

TEST_CASE("sequence parallelism refuses a block size tp does not divide", "[config]") {
  const Config c = parse_config("[grid]\ntp = 4\nsequence_parallel = true\n[model]\nblock_size = 66\n", "deck", {});
  CHECK_THROWS_WITH(plan_launch(c, 4, false), Catch::Contains("model.block_size = 66 is not divisible by it"));
  Config fits = c;
  fits.model.block_size = 64;
  CHECK(plan_launch(fits, 4, false).sequence_parallel);
  Config one = c;  // with one tp rank there is nothing to split
  one.grid.tp = 1;
  CHECK_FALSE(plan_launch(one, 1, false).sequence_parallel);
}

TEST_CASE("context parallelism: grid.cp counts in the world, and what it cannot split is refused by name, every "
          "problem at once", "[config]") {
  const Config c = parse_config("[grid]\ncp = 2\ntp = 2\ncp_comm = allgather\n[model]\nblock_size = 64\n", "deck", {});
  const auto plan = plan_launch(c, 8, false);
  CHECK(plan.shape.dp == 2);  // auto: 8 / (cp · tp)
  CHECK(plan.shape.replicas() == 4);
  CHECK(plan.cp_comm == ContextExchange::Allgather);
  CHECK_THROWS_WITH(plan_launch(c, 6, false), Catch::Contains("cp * tp * pp = 4 must divide"));
  Config bad = c;
  bad.model.block_size = 66;  // not a multiple of 2 · cp
  bad.grid.sequence_parallel = true;
  bad.data.document_mask = bad.data.reset_position_ids = true;
  bad.train.on_oom = OnOom::Backoff;
  try {
    plan_launch(bad, 8, false);
    FAIL("a block size context parallelism cannot split ran");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::StartsWith("4 problems"));
    CHECK_THAT(msg, Catch::Contains("model.block_size = 66 is not divisible by 2 * cp = 2 * grid.tp (sequence "
                                    "parallelism splits each cp rank's tokens over tp) = 8"));
    CHECK_THAT(msg, Catch::Contains("data.document_mask = true with grid.cp = 2") &&
                        Catch::Contains("valid: data.document_mask = false (data.eod_mask_loss works)"));
    CHECK_THAT(msg, Catch::Contains("data.reset_position_ids = true with grid.cp = 2"));
    CHECK_THAT(msg, Catch::Contains("train.on_oom = backoff needs grid.tp = grid.pp = grid.cp = 1"));
  }
  Config cnn = parse_config("[grid]\ncp = 2\n[model]\ntype = cnn\n", "deck", {});
  CHECK_THROWS_WITH(plan_launch(cnn, 2, false), Catch::Contains("model.type = cnn has none; valid: grid.cp = 1"));
  Config moe = parse_config("[grid]\ncp = 2\n[model]\ntype = llama\n[moe]\nexperts = 4\n", "deck", {});
  CHECK_NOTHROW(plan_launch(moe, 2, false));  // dropless experts: the routers' sums add over cp
  moe.moe.capacity_factor = 1.25;
  CHECK_THROWS_WITH(plan_launch(moe, 2, false), Catch::Contains("grid.cp = 2 with moe.capacity_factor = 1.25") &&
                                                    Catch::Contains("valid: moe.capacity_factor = 0 (dropless)"));
}

TEST_CASE("the interleaved schedule is refused by name where it cannot run", "[config]") {
  auto deck = [](const std::string& extra) {
    return parse_config("[grid]\npp = 2\n[model]\nn_layer = 8\n[train]\nmicro_batch = 2\nglobal_batch = 8\n" + extra,
                        "deck", {});
  };
  const auto ok = plan_launch(deck("schedule = interleaved\n[grid]\nvirtual_stages = 2\n"), 2, false);
  CHECK(ok.virtual_stages == 2);
  CHECK(ok.stage_layers.size() == 4);  // one count per virtual stage
  Config odd = deck("schedule = interleaved\n[grid]\nvirtual_stages = 2\n");
  odd.train.global_batch = 6;  // 3 micro-batches over 2 stages
  CHECK_THROWS_WITH(plan_launch(odd, 2, false), Catch::Contains("but a step has 3") && Catch::Contains("valid: a multiple of 2"));
  CHECK_THROWS_WITH(plan_launch(deck("schedule = interleaved\n"), 2, false),
                    Catch::Contains("needs grid.virtual_stages >= 2"));
  CHECK_THROWS_WITH(plan_launch(deck("[grid]\nvirtual_stages = 2\n"), 2, false),
                    Catch::Contains("but train.schedule = 1f1b"));
  Config one = deck("schedule = interleaved\n[grid]\nvirtual_stages = 2\n");
  one.grid.pp = 1;
  CHECK_THROWS_WITH(plan_launch(one, 1, false), Catch::Contains("but grid.pp = 1"));
  Config deep = deck("schedule = interleaved\n[grid]\nvirtual_stages = 8\n");  // 16 virtual stages, 8 layers
  CHECK_THROWS_WITH(plan_launch(deep, 2, false), Catch::Contains("over grid.pp * grid.virtual_stages virtual stages"));
}

TEST_CASE("2-byte weights are refused by name where they cannot run, every problem at once", "[config]") {
  CHECK(problems("[precision]\ntype = bf16\nweights = bf16\n").empty());
  const auto msg = problems("[model]\ntype = cnn\n[precision]\nweights = bf16\n[comm]\ncompression = fp16\n");
  CHECK_THAT(msg, Catch::StartsWith("3 problem(s)"));
  CHECK_THAT(msg, Catch::Contains("precision.weights = bf16 runs the forward in bf16, but precision.type = fp32; "
                                  "valid: precision.type = bf16, or precision.weights = fp32"));
  CHECK_THAT(msg, Catch::Contains("comm.compression = fp16 would compress them again"));
  CHECK_THAT(msg, Catch::Contains("model.type = cnn keeps fp32 weights"));
  CHECK_THAT(problems("[precision]\nweights = fp8\n"), Catch::Contains("precision.weights") && Catch::Contains("fp8"));
}

TEST_CASE("sparsity keys parse, and what cannot run is refused by name, every problem at once", "[config]") {
  const auto c = parse_config("[sparsity]\nmethod = rigl\ntarget = 0.9\ntensors = matrix,head\ndistribution = erk\n",
                              "in.test", {});
  CHECK(c.sparsity.method == SparsityMethod::Rigl);
  CHECK(c.sparsity.tensors == std::vector<TensorClass>{TensorClass::Matrix, TensorClass::Head});
  CHECK(c.sparsity.end_step(c.train.steps) == 750);  // 3/4 of train.steps = 1000
  CHECK(parse_config(config_text(c), "echo", {}).sparsity.tensors == c.sparsity.tensors);
  const auto msg = problems("[grid]\npp = 2\n[optim]\ntype = onebit_adam\n[sparsity]\nmethod = gmp\nstart = 800\n"
                            "tensors = matrix,embedding\n");
  CHECK_THAT(msg, Catch::StartsWith("3 problem(s)"));
  CHECK_THAT(msg, Catch::Contains("sparsity.end = 750 (3/4 of train.steps) is not after sparsity.start = 800"));
  CHECK_THAT(msg, Catch::Contains("sparsity.method = gmp with optim.type = onebit_adam"));
  CHECK_THAT(msg, Catch::Contains("tied token embedding with grid.pp = 2"));
  CHECK_THAT(problems("[sparsity]\ntensors = matrix,bias\n"), Catch::Contains("'bias' is not a tensor class"));
  CHECK_THAT(problems("[sparsity]\ntarget = 1\n"), Catch::Contains("sparsity.target") && Catch::Contains("<= 0.999"));
}

TEST_CASE("all problems are reported together", "[config]") {
  const auto msg = problems("[train]\nsteps = x\nfoo = 1\n[optim]\nlr = 0\n");
  CHECK_THAT(msg, Catch::StartsWith("3 problem(s)"));
  CHECK_THAT(msg, Catch::Contains("train.steps") && Catch::Contains("train.foo") && Catch::Contains("optim.lr"));
}

TEST_CASE("the effective config re-parses to the same values", "[config]") {
  const auto c = parse_config("[optim]\nlr = 0.0123\n[grid]\ndp = 4\n", "in.test",
                              {"--train.seed=7", "--precision.type=bf16", "--checkpoint.resume=run/ckpt"});
  const auto again = parse_config(config_text(c), "echo", {});
  CHECK(again.optim.lr == Approx(0.0123));
  CHECK(again.grid.dp == 4);
  CHECK(again.train.seed == 7);
  CHECK(again.precision.type == PrecisionType::Bf16);
  CHECK(again.checkpoint.resume.mode == Resume::Mode::Path);
  CHECK(again.checkpoint.resume.path == "run/ckpt");
}

TEST_CASE("enum keys take exactly their deck spellings", "[config]") {
  const auto c = parse_config("", "in.test", {"--train.schedule=gpipe", "--comm.backend=mpi", "--optim.type=sgd"});
  CHECK(c.train.schedule == PipelineSchedule::GPipe);
  CHECK(c.comm.backend == Backend::Mpi);
  CHECK(c.optim.type == OptimizerType::Sgd);
  CHECK(std::string(name_of(c.train.schedule)) == "gpipe");
  CHECK_THROWS_WITH(parse_config("", "in.test", {"--train.schedule=GPipe"}),
                    Catch::Contains("train.schedule = 'GPipe': not recognised; valid: one of 1f1b gpipe"));
  CHECK_THROWS_WITH(parse_config("", "in.test", {"--checkpoint.resume="}), Catch::Contains("checkpoint.resume"));
}

TEST_CASE("local checkpoints need checkpoint.dir; debug.kill_rank needs its step", "[config]") {
  CHECK_THROWS_WITH(parse_config("", "in.test", {"--checkpoint.local_interval=10"}),
                    Catch::Contains("checkpoint.local_interval = 10 needs checkpoint.dir (it is 'none')"));
  CHECK_THROWS_WITH(parse_config("", "in.test", {"--debug.kill_rank=1"}),
                    Catch::Contains("debug.kill_rank = 1 needs debug.kill_step >= 1 (it is 0)"));
  const auto c = parse_config("", "in.test", {"--checkpoint.local_interval=10", "--checkpoint.dir=ck",
                                              "--checkpoint.ranks_per_node=2", "--output.straggler_factor=1.5"});
  CHECK(c.checkpoint.local_interval == 10);
  CHECK(c.checkpoint.partner);
  CHECK(c.checkpoint.local_dir == "auto");
  CHECK(c.checkpoint.ranks_per_node == 2);
  CHECK_THROWS_WITH(parse_config("", "in.test", {"--output.straggler_factor=1"}),
                    Catch::Contains("output.straggler_factor = '1': out of range; valid: number > 1"));
}

// --help against the documentation (docs/deck-reference.md), not against the key table it is
// printed from: a key added to the table but not documented, or documented with another
// default, fails here.
TEST_CASE("--help and docs/deck-reference.md list the same keys with the same defaults", "[config]") {
  std::ifstream doc(GRIDTRAIN_SOURCE_DIR "/docs/deck-reference.md");
  REQUIRE(doc.good());
  std::map<std::string, std::string> documented;  // key -> default
  const std::regex row(R"(^\| `([a-z_]+\.[a-z_0-9]+)` \| `([^`]*)` \|)");
  std::smatch m;
  for (std::string line; std::getline(doc, line);)
    if (std::regex_search(line, m, row)) documented[m[1]] = m[2];
  REQUIRE(documented.size() >= 50);
  const auto keys = config_keys();
  CHECK(documented.size() == keys.size());
  const auto help = config_help();
  for (const auto& k : keys) {
    CAPTURE(k.name);
    REQUIRE(documented.count(k.name) == 1);
    CHECK(documented[k.name] == k.default_value);
    CHECK_THAT(help, Catch::Contains("--" + k.name + "=" + k.default_value));
  }
}

TEST_CASE("model.channels parses one channel count >= 1 per cnn stage", "[config]") {
  auto parse = [](const std::string& text) { return parse_config("", "test", {"--model.channels=" + text}); };
  CHECK(parse("16").model.channels == std::vector<int>{16});
  CHECK(parse("8,16,32").model.channels == std::vector<int>{8, 16, 32});
  CHECK(show_key(parse("8,16"), "model.channels") == "8,16");
  CHECK_THROWS_WITH(parse("32,0"), Catch::Contains("at least one channel, got 0"));
  CHECK_THROWS_WITH(parse("32,x"), Catch::Contains("'x' is not a channel count"));
  CHECK_THROWS_WITH(parse_config("[model]\nchannels =\n", "test", {}), Catch::Contains("model.channels") && Catch::Contains("empty"));
  CHECK_THROWS_WITH(parse_config("", "test", {"--model.type=mlp"}), Catch::Contains("one of gpt cnn"));
}

TEST_CASE("the document keys are for language models; data.eod_token is auto or a token id", "[config]") {
  const Config c = parse_config("", "test", {"--data.document_mask=true", "--data.eod_token=10"});
  CHECK((c.data.document_mask && c.data.documents() && c.data.eod_token == 10));
  CHECK(parse_config("", "test", {"--data.eod_token=auto"}).data.eod_token == -1);
  CHECK(!parse_config("", "test", {}).data.documents());
  for (const char* key : {"--data.reset_position_ids=true", "--data.document_mask=true", "--data.eod_mask_loss=true"})
    CHECK_THAT(problems("", {"--model.type=cnn", key}), Catch::Contains("but model.type = cnn trains on images"));
  CHECK_THAT(problems("", {"--data.eod_token=-2"}),
             Catch::Contains("data.eod_token = '-2'") && Catch::Contains("valid: integer >= 0"));
}

TEST_CASE("data.blend takes Megatron's weight-path pairs, normalized; malformed blends are refused by item", "[config]") {
  const Config c = parse_config("", "test", {"--data.blend=3 data/a 1 data/b"});
  const BlendSpec b = parse_blend(c.data.blend);
  CHECK(b.paths == std::vector<std::string>{"data/a", "data/b"});
  CHECK(b.weights == std::vector<double>{0.75, 0.25});
  CHECK(b.text() == "0.75 data/a 0.25 data/b");
  CHECK(parse_config("", "test", {"--data.blend=none"}).data.blend.empty());
  CHECK_THAT(problems("", {"--data.blend=0.5 data/a"}), Catch::Contains("fewer than two datasets"));
  CHECK_THAT(problems("", {"--data.blend=0.5 data/a 0.5"}), Catch::Contains("an odd number of items (3)"));
  CHECK_THAT(problems("", {"--data.blend=0.5 data/a x data/b"}),
             Catch::Contains("weight 'x' of 'data/b' is not a positive number"));
  CHECK_THAT(problems("", {"--data.blend=0.5 data/a 0 data/b"}), Catch::Contains("weight '0' of 'data/b'"));
  CHECK_THAT(problems("", {"--data.blend=0.5 data/a 0.5 data/a"}), Catch::Contains("'data/a' is named twice"));
  CHECK_THAT(problems("", {"--model.type=cnn", "--data.blend=1 a 1 b"}), Catch::Contains("data.blend mixes token datasets"));
}

TEST_CASE("data.random_crop is for images: refused with gpt, out-of-range values named", "[config]") {
  CHECK(parse_config("", "test", {"--model.type=cnn", "--data.random_crop=4"}).data.random_crop == 4);
  CHECK_THAT(problems("", {"--data.random_crop=2"}),
             Catch::Contains("data.random_crop = 2 crops images, but model.type = gpt") && Catch::Contains("valid: 0"));
  CHECK_THAT(problems("", {"--model.type=cnn", "--data.random_crop=65"}), Catch::Contains("valid: integer in [0, 64]"));
}
