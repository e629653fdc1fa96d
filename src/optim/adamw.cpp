#include <cmath>

#include "gridtrain/optim/adamw.hpp"

namespace gridtrain {

#if TORCH_VERSION_MAJOR >= 2
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
#endif

AdamKernels default_adam_kernels() {
  return TORCH_VERSION_MAJOR >= 2 ? AdamKernels::MultiTensor : AdamKernels::PerTensor;
}

void adam_moments(std::span<AdamSlot> slots, double beta1, double beta2, bool second_moment, AdamKernels k) {
#if TORCH_VERSION_MAJOR >= 2
  if (k == AdamKernels::MultiTensor) {
    const Lists l = lists_of(slots);
    at::_foreach_lerp_(l.exp_avg, l.grads, 1.0 - beta1);
    if (!second_moment) return;
    at::_foreach_mul_(l.exp_avg_sq, beta2);
    at::_foreach_addcmul_(l.exp_avg_sq, l.grads, l.grads, 1.0 - beta2);
    return;
  }
#endif
  (void)k;
  for (auto& s : slots) {
    const auto& g = s.p.param.grad();
    s.exp_avg.lerp_(g, 1.0 - beta1);
    if (second_moment) s.exp_avg_sq.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
  }
}

void adam_apply(std::span<AdamSlot> slots, double lr, double bc1, double bc2_sqrt, double eps, double weight_decay,
                AdamKernels k) {
#if TORCH_VERSION_MAJOR >= 2
  if (k == AdamKernels::MultiTensor) {
    const Lists l = lists_of(slots);
    if (weight_decay != 0.0 && !l.decayed.empty()) at::_foreach_mul_(l.decayed, 1.0 - lr * weight_decay);
    auto denom = at::_foreach_sqrt(l.exp_avg_sq);
    at::_foreach_div_(denom, bc2_sqrt);
    at::_foreach_add_(denom, eps);
    at::_foreach_addcdiv_(l.params, l.exp_avg, denom, -lr / bc1);
    return;
  }
#endif
  (void)k;
  for (auto& s : slots) {
    auto& p = s.p.param;
    if (s.decay && weight_decay != 0.0) p.mul_(1.0 - lr * weight_decay);
    p.addcdiv_(s.exp_avg, (s.exp_avg_sq.sqrt() / bc2_sqrt).add_(eps), -lr / bc1);
  }
}

AdamW::AdamW(std::vector<NamedParameter> params, double beta1, double beta2, double eps, double weight_decay,
             AdamKernels kernels)
    : beta1_(beta1), beta2_(beta2), eps_(eps), wd_(weight_decay), kernels_(kernels) {
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
  if (kernels_ == AdamKernels::MultiTensor) {
    adam_moments(slots_, beta1_, beta2_, /*second_moment=*/true, kernels_);
    adam_apply(slots_, lr, bc1, bc2_sqrt, eps_, wd_, kernels_);
    return;
  }
  for (auto& s : slots_) {  // one tensor at a time: its four buffers stay in cache between the two passes
    adam_moments({&s, 1}, beta1_, beta2_, /*second_moment=*/true, kernels_);
    adam_apply({&s, 1}, lr, bc1, bc2_sqrt, eps_, wd_, kernels_);
  }
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
