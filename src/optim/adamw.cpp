#include <cmath>

#include "gridtrain/optim/adamw.hpp"

namespace gridtrain {

AdamW::AdamW(std::vector<NamedParameter> params, double beta1, double beta2, double eps, double weight_decay)
    : beta1_(beta1), beta2_(beta2), eps_(eps), wd_(weight_decay) {
  for (auto& p : params) {
    const bool decay = p.param.dim() >= 2;
    slots_.push_back({p, torch::zeros_like(p.param), torch::zeros_like(p.param), decay});
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2_, static_cast<double>(steps_)));
  for (auto& s : slots_) {
    const auto& g = s.p.param.grad();
    s.exp_avg.lerp_(g, 1.0 - beta1_);
    s.exp_avg_sq.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    adam_apply(s, lr, bc1, bc2_sqrt, eps_, wd_);
  }
}

void adam_apply(AdamSlot& s, double lr, double bc1, double bc2_sqrt, double eps, double weight_decay) {
  auto& p = s.p.param;
  if (s.decay && weight_decay != 0.0) p.mul_(1.0 - lr * weight_decay);
  p.addcdiv_(s.exp_avg, (s.exp_avg_sq.sqrt() / bc2_sqrt).add_(eps), -lr / bc1);
}

std::vector<NamedParameter> adam_state(std::vector<AdamSlot>& slots) {
  std::vector<NamedParameter> out;
  for (auto& s : slots) {
    out.push_back({s.p.name + "/exp_avg", s.exp_avg});
    out.push_back({s.p.name + "/exp_avg_sq", s.exp_avg_sq});
  }
  return out;
}

}  // namespace gridtrain
