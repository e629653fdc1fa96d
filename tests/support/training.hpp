// Small training runs for MPI tests: a shared scratch corpus, a tiny GPT config, and bitwise
// comparison of model + optimizer state.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/app/sparsity_fix.hpp"
#include "gridtrain/app/trainer.hpp"

namespace gridtrain::test {

int world_rank();
int world_size();
/// A shared scratch directory (made by rank 0) with a small corpus in it; collective over world.
std::string shared_dir(const std::string& name);
/// A shared scratch directory (made by rank 0) with 256 training and 64 test images (make_images)
/// for tiny_cnn; collective over world.
std::string shared_image_dir(const std::string& name);
/// A 2-layer GPT on dir's corpus, micro-batch 2, warmup 4 and decay 8 steps (so that a short
/// run is a prefix of a longer one).
Config tiny(const std::string& dir, int steps, int global_batch);
/// The language-model families the equivalence tests run: "gpt" (c as it is), "llama" (the same
/// sizes as a Llama with n_head / 2 key/value heads, untied) and "llama-tied" (tied embeddings).
inline const std::vector<std::string> kLanguageModels = {"gpt", "llama", "llama-tied"};
/// c as `family` of kLanguageModels.
Config as_family(Config c, const std::string& family);
/// A mixture-of-experts llama on dir's corpus: 2 layers, both MoE, 4 experts of width 16, top-2, a
/// shared expert of 24, z-loss 1e-3; micro-batch 2, global batch 8 at grid.dp = dp, so that every
/// layout runs the same micro-batches (the balancing losses are per micro-batch); no checkpoints.
Config moe_llama(const std::string& dir, int steps, int dp);
/// A 2-stage CNN (channels 4, 8) on dir's image set (make_images), micro-batch 4, the same
/// schedule as tiny.
Config tiny_cnn(const std::string& dir, int steps, int global_batch);
/// A log that prints nothing, for the runs of the tests.
Log& quiet_log();
/// A Trainer of c on comm that prints nothing, its peak given as 1 GFLOP/s (the tests do not
/// check MFU against a real peak, and the probe would cost each run a second).
class QuietTrainer : public Trainer {
 public:
  explicit QuietTrainer(const Config& c, MPI_Comm comm = MPI_COMM_WORLD) : Trainer(c, comm, quiet_log(), 1.0) {}
};
/// Trains c on comm (a QuietTrainer) and returns the result.
RunResult quiet_run(const Config& c, MPI_Comm comm = MPI_COMM_WORLD);
/// Copies of every parameter, batch-norm statistic, optimizer state tensor, fp32 master weight and
/// sparsity mask.
std::vector<torch::Tensor> snapshot(Trainer& t);
/// The run's sparse training (sparsity.method != none), or null.
inline SparseTraining* sparsity(Trainer& t) {
  SparsityFix* fix = t.fixes().find<SparsityFix>();
  return fix ? &fix->training() : nullptr;
}
bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b);
/// |a − b| / |b| (b's magnitude floored at 1e-30).
inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }
/// ‖a − b‖ / ‖b‖ in Frobenius norm, computed in float64 (‖b‖ floored at 1e-30).
inline double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = b.to(torch::kDouble);
  return ((a.to(torch::kDouble) - d).norm() / d.norm().clamp_min(1e-30)).item<double>();
}
/// ‖a − b‖ / ‖b‖ over all parameters of two models of one layout. Not per element or per tensor:
/// the key part of GPT's attn.c_attn.bias has an exactly-zero gradient in exact arithmetic
/// (softmax is shift invariant), so Adam turns its rounding noise into ±lr steps that differ
/// between any two summation orders.
double rel_diff(Model& a, Model& b);
/// The reshard tests' start: trains config(3, 3) (3 steps at ZeRO stage 3) into dir/ckpt and
/// returns config(5, 0), stage 0 resuming from that step-3 file: whole tensors, the reference.
Config save_at_stage3(const std::string& dir, const std::function<Config(int steps, int stage)>& config);
/// Checks that each piece (a ZeRO piece: a flat view with an offset) holds the elements of the
/// whole tensor of its name at its offset, bit for bit.
void check_pieces(const std::vector<NamedParameter>& pieces, const std::map<std::string, torch::Tensor>& whole);
/// Checks that two runs have the same loss and gradient norm at every step, within `tolerance`
/// relative.
void check_same_run(const RunResult& got, const RunResult& want, double tolerance = 1e-6);
/// c, resuming (checkpoint.resume = auto) from checkpoint_dir, which it also writes into.
Config resuming(Config c, const std::string& checkpoint_dir);
/// Trains config(total) straight (no checkpoints), config(stop) checkpointing into checkpoint_dir, then
/// config(total) resumed from it (checkpoint.resume = auto), and checks that the resumed run
/// starts at `stop` and continues the straight one bit for bit: the same loss at every step from
/// `stop` on, the same final parameters and optimizer state. Collective over world.
void check_resume(const std::string& checkpoint_dir, const std::function<Config(int steps)>& config, int stop,
                  int total);

}  // namespace gridtrain::test
