#include <cmath>

#include "gridtrain/optim/adamw.hpp"

namespace gridtrain {

namespace {

struct Lists {  // the slots' tensors as ATen tensor lists
  std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq, decayed;
};

Lists lists_of(std::span<AdamSlot> slots) {
  Lists l;
  for (auto& s : slots) {
    l.params.push_back(s.p.param);
    l.grads.push_back(s.p.param.grad());
    l.exp_avg.push_back(s.exp_avg);
    l.exp_avg_sq.push_back(s.exp_avg_sq);
    if (s.decay) l.decayed.push_back(s.p.param);
  }
  return l;
}

}  // namespace

AdamKernels default_adam_kernels(bool cuda) { return cuda ? AdamKernels::Fused : AdamKernels::MultiTensor; }

void adam_moments(std::span<AdamSlot> slots, double beta1, double beta2, bool second_moment) {
  const Lists l = lists_of(slots);
  at::_foreach_lerp_(l.exp_avg, l.grads, 1.0 - beta1);
  if (!second_moment) return;
  at::_foreach_mul_(l.exp_avg_sq, beta2);
  at::_foreach_addcmul_(l.exp_avg_sq, l.grads, l.grads, 1.0 - beta2);
}

void adam_apply(std::span<AdamSlot> slots, double lr, double bc1, double bc2_sqrt, double eps, double weight_decay) {
  const Lists l = lists_of(slots);
  if (weight_decay != 0.0 && !l.decayed.empty()) at::_foreach_mul_(l.decayed, 1.0 - lr * weight_decay);
  auto denom = at::_foreach_sqrt(l.exp_avg_sq);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(l.params, l.exp_avg, denom, -lr / bc1);
}

AdamW::AdamW(std::vector<NamedParameter> params, double beta1, double beta2, double eps, double weight_decay,
             AdamKernels kernels)
    : beta1_(beta1), beta2_(beta2), eps_(eps), wd_(weight_decay), kernels_(kernels) {
  for (auto& p : params) {
    const bool decay = p.decays();
    slots_.push_back({p, torch::zeros_like(p.param), torch::zeros_like(p.param), decay});
  }
  if (!slots_.empty()) step_t_ = torch::zeros({}, slots_.front().p.param.options());
}

// Two calls, as weight decay applies to the decay slots only; the kernel takes t from step_t_.
void AdamW::fused_step(double lr) {
  step_t_.fill_(static_cast<double>(steps_));  // a kernel launch with a host scalar, no synchronisation
  for (const bool decay : {true, false}) {
    std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq;
    for (auto& s : slots_) {
      if (s.decay != decay) continue;
      params.push_back(s.p.param);
      grads.push_back(s.p.param.grad());
      exp_avg.push_back(s.exp_avg);
      exp_avg_sq.push_back(s.exp_avg_sq);
    }
    if (params.empty()) continue;
    const std::vector<torch::Tensor> steps(params.size(), step_t_);
    at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, /*max_exp_avg_sqs=*/{}, steps, lr, beta1_, beta2_,
                      decay ? wd_ : 0.0, eps_, /*amsgrad=*/false, /*maximize=*/false);
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (kernels_ == AdamKernels::Fused) {
    fused_step(lr);
    return;
  }
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2_, static_cast<double>(steps_)));
  adam_moments(slots_, beta1_, beta2_, /*second_moment=*/true);
  adam_apply(slots_, lr, bc1, bc2_sqrt, eps_, wd_);
}

std::vector<NamedParameter> adam_state(std::vector<AdamSlot>& slots) {
  std::vector<NamedParameter> out;
  for (auto& s : slots) {
    out.push_back({s.p.name + "/exp_avg", s.exp_avg, s.p.shape, s.p.offset});
    out.push_back({s.p.name + "/exp_avg_sq", s.exp_avg_sq, s.p.shape, s.p.offset});
  }
  return out;
}

}  // namespace gridtrain
