#include "gridtrain/optim/sgd.hpp"

namespace gridtrain {

Sgd::Sgd(std::vector<NamedParameter> params, double momentum, double weight_decay)
    : momentum_(momentum), wd_(weight_decay) {
  for (auto& p : params) slots_.push_back({p, torch::zeros_like(p.param), p.decays()});
}

void Sgd::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  for (auto& s : slots_) {
    auto& p = s.p.param;
    auto g = p.grad();
    if (s.decay && wd_ != 0.0) g = g + wd_ * p;
    s.momentum_buffer.mul_(momentum_).add_(g);
    p.add_(s.momentum_buffer, -lr);
  }
}

std::vector<NamedParameter> Sgd::state() {
  std::vector<NamedParameter> out;
  for (auto& s : slots_) out.push_back({s.p.name + "/momentum_buffer", s.momentum_buffer, s.p.shape, s.p.offset});
  return out;
}

}  // namespace gridtrain
