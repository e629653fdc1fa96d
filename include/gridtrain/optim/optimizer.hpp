// Optimizers over fp32 parameters, keyed by the deck's optim.type (registry in optim/registry.cpp).
// Weight decay applies to >= 2-D weights only (matrices and embeddings), never to biases or
// LayerNorm gains, as in GPT-2/nanoGPT.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/parallel/compressed_allreduce.hpp"

namespace gridtrain {

struct Config;
class Axis;

struct NamedParameter {
  std::string name;
  torch::Tensor param;  ///< leaf tensor with .grad set by the reducer
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update with learning rate lr to every parameter from its .grad.
  virtual void step(double lr) = 0;
  /// The deck's optim.type of this optimizer.
  virtual std::string type() const = 0;
  /// Live state tensors named "<param>/<state>" (e.g. "wte.weight/exp_avg"), each shaped like
  /// its parameter; checkpoints save them and load into them in place.
  virtual std::vector<NamedParameter> state() = 0;
  /// Updates applied so far (Adam's t, for bias correction).
  long long steps() const { return steps_; }
  void set_steps(long long t) { steps_ = t; }
  /// True when the next step() exchanges optimizer state over dp itself, so that gradients must
  /// stay local (not be allreduced) for that step.
  virtual bool owns_communication() const { return false; }
  /// State that differs between ranks (error-feedback residuals: flat fp32 tensors), by name.
  /// Checkpoints store it per rank and restore it in place onto the same number of ranks.
  virtual std::vector<std::pair<std::string, torch::Tensor>> rank_state() { return {}; }
  /// Bytes this rank sent on dp during the last step() (0 for optimizers that do not communicate).
  virtual std::uint64_t bytes_sent() const { return 0; }

 protected:
  long long steps_ = 0;
};

/// Builds c.optim.type over params; dp is the axis optimizers that communicate use. Throws
/// gridtrain::Error for an unknown type.
std::unique_ptr<Optimizer> make_optimizer(const Config& c, std::vector<NamedParameter> params, Axis& dp);

/// One parameter's Adam state; shared by AdamW and OnebitAdam.
struct AdamSlot {
  NamedParameter p;
  torch::Tensor exp_avg, exp_avg_sq;  // shaped like p
  bool decay;                         // >= 2-D weights only
};

/// p ← p·(1 − lr·wd) − lr/bc1 · m / (sqrt(v)/bc2_sqrt + ε), the AdamW parameter update given the
/// slot's moments and bias corrections bc1 = 1 − β1^t, bc2_sqrt = sqrt(1 − β2^t).
void adam_apply(AdamSlot& s, double lr, double bc1, double bc2_sqrt, double eps, double weight_decay);
/// "<param>/exp_avg" and "<param>/exp_avg_sq" of every slot.
std::vector<NamedParameter> adam_state(std::vector<AdamSlot>& slots);

/// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"), the same update as
/// torch.optim.AdamW: p ← p·(1 − lr·wd); m ← β1 m + (1 − β1) g; v ← β2 v + (1 − β2) g²;
/// p ← p − lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + ε).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedParameter> params, double beta1, double beta2, double eps, double weight_decay);
  void step(double lr) override;
  std::string type() const override { return "adamw"; }
  std::vector<NamedParameter> state() override { return adam_state(slots_); }

 private:
  std::vector<AdamSlot> slots_;
  double beta1_, beta2_, eps_, wd_;
};

/// SGD with heavy-ball momentum as torch.optim.SGD (dampening 0): g ← g + wd·p (>= 2-D only);
/// b ← μ b + g; p ← p − lr·b.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<NamedParameter> params, double momentum, double weight_decay);
  void step(double lr) override;
  std::string type() const override { return "sgd"; }
  std::vector<NamedParameter> state() override;

 private:
  struct Slot {
    NamedParameter p;
    torch::Tensor momentum_buffer;
    bool decay;
  };
  std::vector<Slot> slots_;
  double momentum_, wd_;
};

/// 1-bit Adam (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale Training with
/// Adam's Convergence Speed"). For the first freeze_step steps it is AdamW on allreduced
/// gradients. Then the second moment v is frozen (with its bias correction), gradients stay
/// local, and each step updates the local momentum m ← β1 m + (1 − β1) g and replaces it by its
/// mean over dp, exchanged 1-bit compressed with worker and server error feedback
/// (compressed_allreduce_mean); p ← p·(1 − lr·wd) − lr/(1 − β1^t) · m / (sqrt(v/(1 − β2^T)) + ε).
/// All momenta live in one flat buffer, so a step makes one compressed exchange.
class OnebitAdam : public Optimizer {
 public:
  OnebitAdam(std::vector<NamedParameter> params, Axis& dp, double beta1, double beta2, double eps,
             double weight_decay, long long freeze_step);
  void step(double lr) override;
  std::string type() const override { return "onebit_adam"; }
  std::vector<NamedParameter> state() override { return adam_state(slots_); }
  bool owns_communication() const override { return steps_ >= freeze_; }
  std::vector<std::pair<std::string, torch::Tensor>> rank_state() override;
  std::uint64_t bytes_sent() const override { return bytes_; }

 private:
  Axis& dp_;
  std::vector<AdamSlot> slots_;  // exp_avg: views into flat_exp_avg_
  torch::Tensor flat_exp_avg_;  // (N,) all momenta
  std::unique_ptr<Compressor> onebit_;
  FeedbackState feedback_;
  double beta1_, beta2_, eps_, wd_;
  long long freeze_;
  std::uint64_t bytes_ = 0;
};

}  // namespace gridtrain
