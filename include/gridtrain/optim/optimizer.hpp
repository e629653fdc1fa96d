// The optimizer interface over fp32 parameters, and its factory keyed by the deck's optim.type
// (the factory in optim/optimizer.cpp; the optimizers are optim/adamw.hpp, sgd.hpp, onebit_adam.hpp).
// Weight decay applies to >= 2-D weights only (matrices and embeddings), never to biases or
// LayerNorm gains, as in GPT-2/nanoGPT.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

class Axis;

struct NamedParameter {
  std::string name;
  torch::Tensor param;  ///< leaf tensor with .grad set by the reducer, or a piece of one (below)
  /// Under ZeRO (optim.zero_stage >= 1) param is this rank's piece of parameter `name`: elements
  /// [offset, offset + param.numel()) of it flattened (row-major), a 1-D view, possibly empty;
  /// `shape` is the whole parameter's. Empty shape: param is the whole parameter.
  std::vector<std::int64_t> shape = {};
  std::int64_t offset = 0;
  /// Weight decay applies: the parameter (not the piece) has >= 2 dimensions.
  bool decays() const { return (shape.empty() ? param.dim() : static_cast<std::int64_t>(shape.size())) >= 2; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update with learning rate lr to every parameter from its .grad.
  virtual void step(double lr) = 0;
  /// The deck's optim.type of this optimizer.
  virtual OptimizerType type() const = 0;
  /// Live state tensors named "<param>/<state>" (e.g. "wte.weight/exp_avg"), each shaped like
  /// its parameter, or its piece under ZeRO (same shape and offset); checkpoints save them and load
  /// into them in place.
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

 protected:
  long long steps_ = 0;
};

/// Builds c.optim.type over params; dp is the axis optimizers that communicate use.
std::unique_ptr<Optimizer> make_optimizer(const Config& c, std::vector<NamedParameter> params, Axis& dp);

/// fp32 optimizer-state bytes per parameter of optim.type: 8 AdamW (exp_avg, exp_avg_sq), 4 SGD
/// (momentum), 16 1-bit Adam (also its two error-feedback residuals). For memory estimates.
double optimizer_state_bytes_per_param(OptimizerType type);

/// Bytes per element of the parameters and of the gradients: 4 for precision.weights = fp32, 2 for
/// bf16 and fp16.
int weight_bytes(PrecisionType weights);

/// Bytes per rank of Ψ parameters' {parameters, gradients, optimizer state} over dp ranks at ZeRO
/// `stage` (Rajbhandari et al. 2020, §3 and Fig. 1): stage 1 shards the optimizer state, 2 also
/// the gradients, 3 also the parameters. With fp32 weights: 4Ψ each for parameters and gradients
/// and K·Ψ of optimizer state (K = optimizer_state_bytes_per_param(type)). With 2-byte weights,
/// the paper's mixed-precision accounting: 2Ψ each, and (K + 4)Ψ of optimizer state, the fp32
/// master weights counted with it (16Ψ in all for AdamW, 12Ψ of it sharded from stage 1 on).
std::array<double, 3> zero_state_bytes(int stage, double psi, OptimizerType type, PrecisionType weights, int dp);
/// Which accounting zero_state_bytes uses, in words with its bytes per parameter, e.g. "bf16
/// weights and gradients, fp32 master weights with the optimizer state: 2 + 2 + 12 bytes per
/// parameter (Rajbhandari et al. 2020)".
std::string state_accounting(OptimizerType type, PrecisionType weights);

}  // namespace gridtrain
