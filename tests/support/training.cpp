#include "training.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "corpus.hpp"
#include "mpi_util.hpp"

namespace gridtrain::test {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A shared scratch directory (made by rank 0) with a small corpus in it.
std::string shared_dir(const std::string& name) {
  std::string dir;
  if (world_rank() == 0) {
    dir = test::temp_dir(name);
    test::make_corpus(dir, 20000);
  }
  return test::bcast(dir, MPI_COMM_WORLD);
}

std::string shared_image_dir(const std::string& name) {
  std::string dir;
  if (world_rank() == 0) {
    dir = test::temp_dir(name);
    test::make_images(dir, 256, 64);
  }
  return test::bcast(dir, MPI_COMM_WORLD);
}

Config tiny(const std::string& dir, int steps, int global_batch) {
  Config c = parse_config("", "test", {});
  c.data.path = dir + "/corpus.h5";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.block_size = 16;
  c.train.steps = steps;
  c.train.micro_batch = 2;
  c.train.global_batch = global_batch;
  c.train.eval_samples = 4;
  c.train.eval_interval = 0;
  c.optim.warmup_steps = 4;
  c.optim.decay_steps = 8;  // schedule independent of train.steps, so a short run is a prefix
  c.output.dir = dir + "/out";
  return c;
}

Config as_family(Config c, const std::string& family) {
  if (family == "gpt") return c;
  REQUIRE((family == "llama" || family == "llama-tied"));
  c.model.type = ModelType::Llama;
  c.model.n_kv_head = std::max(1, c.model.n_head / 2);
  c.model.multiple_of = 8;
  c.model.tie_embeddings = family == "llama-tied";
  return c;
}

Config moe_llama(const std::string& dir, int steps, int dp) {
  Config c = as_family(tiny(dir, steps, 8), "llama");
  c.model.n_embd = 32;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  c.moe.experts = 4;
  c.moe.ffn_hidden = 16;
  c.moe.shared_ffn_hidden = 24;
  c.moe.z_loss_coeff = 1e-3;
  c.grid.dp = dp;
  c.checkpoint.dir = "none";
  return c;
}

Config tiny_cnn(const std::string& dir, int steps, int global_batch) {
  Config c = tiny(dir, steps, global_batch);
  c.model.type = ModelType::Cnn;
  c.model.channels = {4, 8};
  c.data.path = dir + "/images.h5";
  c.train.micro_batch = 4;
  c.train.eval_samples = 64;
  return c;
}

Log& quiet_log() {
  static Log quiet(false);
  return quiet;
}

RunResult quiet_run(const Config& c, MPI_Comm comm) { return QuietTrainer(c, comm).run(); }

std::vector<torch::Tensor> snapshot(Trainer& t) {
  const WholeParameters whole(t.groups());  // ZeRO stage 3 holds shards between steps
  std::vector<torch::Tensor> out;
  for (auto& p : t.model().parameters()) out.push_back(p.detach().clone());
  for (auto& [name, b] : t.model().kept_state()) out.push_back(b.clone());  // batch-norm statistics, expert biases
  for (auto& s : t.optimizer().state()) out.push_back(s.param.clone());
  if (const MasterWeights* m = t.masters())
    for (const auto& p : m->masters()) out.push_back(p.param.clone());
  if (SparseTraining* sparse = sparsity(t))
    for (const auto& m : sparse->masks()) out.push_back(m.param.clone());
  return out;
}

Config save_at_stage3(const std::string& dir, const std::function<Config(int steps, int stage)>& config) {
  Config c = config(3, 3);
  c.checkpoint.dir = dir + "/ckpt";
  quiet_run(c);
  Config load = config(5, 0);
  load.checkpoint.resume = {Resume::Mode::Path, dir + "/ckpt/step-00000003.h5"};
  return load;
}

void check_pieces(const std::vector<NamedParameter>& pieces, const std::map<std::string, torch::Tensor>& whole) {
  for (const auto& piece : pieces) {
    CAPTURE(piece.name);
    REQUIRE(whole.count(piece.name) == 1);
    const auto want = whole.at(piece.name).reshape(-1).narrow(0, piece.offset, piece.param.numel());
    CHECK(torch::equal(piece.param, want));
  }
}

void check_same_run(const RunResult& got, const RunResult& want, double tolerance) {
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); };
  REQUIRE(got.losses.size() == want.losses.size());
  REQUIRE(got.grad_norms.size() == want.grad_norms.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(rel(got.losses[s], want.losses[s]) <= tolerance);
    CHECK(rel(got.grad_norms[s], want.grad_norms[s]) <= tolerance);
  }
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].sizes() != b[i].sizes() ||
        (a[i].nbytes() > 0 && std::memcmp(a[i].data_ptr(), b[i].data_ptr(), a[i].nbytes()) != 0))  // empty: null data
      return false;
  return true;
}

Config resuming(Config c, const std::string& checkpoint_dir) {
  c.checkpoint.dir = checkpoint_dir;
  c.checkpoint.resume = {Resume::Mode::Auto, ""};
  return c;
}

double rel_diff(Model& a, Model& b) {
  double diff = 0, norm = 0;
  auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    diff += (pa[i] - pb[i]).to(torch::kFloat64).square().sum().item<double>();
    norm += pb[i].to(torch::kFloat64).square().sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

void check_resume(const std::string& checkpoint_dir, const std::function<Config(int steps)>& config, int stop,
                  int total) {
  Config whole = config(total);
  whole.checkpoint.dir = "none";
  QuietTrainer straight(whole);
  const auto full = straight.run();
  Config first = config(stop);
  first.checkpoint.dir = checkpoint_dir;
  quiet_run(first);
  QuietTrainer resumed(resuming(config(total), checkpoint_dir));
  REQUIRE(resumed.start_step() == stop);
  REQUIRE(full.losses.size() == static_cast<std::size_t>(total));
  const auto rest = resumed.run();
  REQUIRE(rest.losses.size() == static_cast<std::size_t>(total - stop));
  for (int s = stop; s < total; ++s) CHECK(rest.losses[static_cast<std::size_t>(s - stop)] == full.losses[static_cast<std::size_t>(s)]);
  CHECK(bitwise_equal(snapshot(resumed), snapshot(straight)));
}

}  // namespace gridtrain::test
