// optim.type -> constructor. Register new optimizers here.
#include <functional>
#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/optim/adamw.hpp"
#include "gridtrain/optim/onebit_adam.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/optim/sgd.hpp"

namespace gridtrain {

double optimizer_state_bytes_per_param(OptimizerType type) {
  switch (type) {
    case OptimizerType::Sgd: return 4.0;          // momentum
    case OptimizerType::OnebitAdam: return 16.0;  // exp_avg, exp_avg_sq, worker and server residuals
    case OptimizerType::AdamW: break;
  }
  return 8.0;  // exp_avg, exp_avg_sq
}

int weight_bytes(PrecisionType weights) { return weights == PrecisionType::Fp32 ? 4 : 2; }

std::array<double, 3> zero_state_bytes(int stage, double psi, OptimizerType type, PrecisionType weights, int dp) {
  const double w = weight_bytes(weights);
  const double k = optimizer_state_bytes_per_param(type) + (w == 4 ? 0.0 : 4.0);  // 2-byte weights: + the fp32 master
  return {w * psi / (stage >= 3 ? dp : 1), w * psi / (stage >= 2 ? dp : 1), k * psi / (stage >= 1 ? dp : 1)};
}

std::string state_accounting(OptimizerType type, PrecisionType weights) {
  const auto per = zero_state_bytes(0, 1.0, type, weights, 1);  // bytes per parameter, unsharded
  auto show = [](double b) { return std::to_string(static_cast<int>(b)); };
  const std::string bytes = ": " + show(per[0]) + " + " + show(per[1]) + " + " + show(per[2]) +
                            " bytes per parameter (Rajbhandari et al. 2020)";
  if (weights == PrecisionType::Fp32) return "fp32 weights and gradients, optimizer state" + bytes;
  return std::string(name_of(weights)) + " weights and gradients, fp32 master weights with the optimizer state" + bytes;
}

std::unique_ptr<Optimizer> make_optimizer(const Config& c, std::vector<NamedParameter> params, Axis& dp) {
  using Factory = std::function<std::unique_ptr<Optimizer>(const Config&, std::vector<NamedParameter>, Axis&)>;
  static const std::map<OptimizerType, Factory> registry = {
      {OptimizerType::AdamW, [](const Config& cfg, std::vector<NamedParameter> p, Axis&) -> std::unique_ptr<Optimizer> {
         const bool cuda = !p.empty() && p.front().param.is_cuda();
         return std::make_unique<AdamW>(std::move(p), cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps,
                                        cfg.optim.weight_decay, default_adam_kernels(cuda));
       }},
      {OptimizerType::Sgd, [](const Config& cfg, std::vector<NamedParameter> p, Axis&) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Sgd>(std::move(p), cfg.optim.momentum, cfg.optim.weight_decay);
       }},
      {OptimizerType::OnebitAdam, [](const Config& cfg, std::vector<NamedParameter> p, Axis& axis) -> std::unique_ptr<Optimizer> {
         return std::make_unique<OnebitAdam>(std::move(p), axis, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps,
                                             cfg.optim.weight_decay, cfg.optim.freeze_step, cfg.optim.frozen_v_floor);
       }},
  };
  return registry.at(c.optim.type)(c, std::move(params), dp);  // every OptimizerType is registered
}

}  // namespace gridtrain
