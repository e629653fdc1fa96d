#include <cmath>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/optim/onebit_adam.hpp"

namespace gridtrain {

OnebitAdam::OnebitAdam(std::vector<NamedParameter> params, Axis& dp, double beta1, double beta2, double eps,
                       double weight_decay, long long freeze_step, double v_floor)
    : dp_(dp), onebit_(make_compressor(CompressorKind::OneBit, memory_of(params.at(0).param))), beta1_(beta1), beta2_(beta2), eps_(eps), wd_(weight_decay),
      v_floor_(v_floor), freeze_(freeze_step) {
  const auto options = params.at(0).param.options();
  std::int64_t n = 0;
  for (auto& p : params) n += p.param.numel();
  flat_exp_avg_ = torch::zeros({n}, options);
  std::int64_t offset = 0;
  for (auto& p : params) {
    auto m = flat_exp_avg_.narrow(0, offset, p.param.numel()).view(p.param.sizes());
    offset += p.param.numel();
    slots_.push_back({p, m, torch::zeros_like(p.param), p.decays()});
  }
  // Residuals sized up front so that checkpoints always hold them (worker: N padded to a
  // multiple of dp; server: one chunk).
  const std::int64_t p = dp_.size(), chunk = (n + p - 1) / p;
  feedback_ = {torch::zeros({chunk * p}, options), torch::zeros({chunk}, options)};
}

void OnebitAdam::step(double lr) {
  torch::NoGradGuard no_grad;
  const bool compressed = owns_communication();  // decided before the count advances
  ++steps_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  // The second moment stops at the freeze step, and so does its bias correction.
  const double t2 = static_cast<double>(compressed ? freeze_ : steps_);
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2_, t2));
  if (compressed && steps_ == freeze_ + 1 && v_floor_ > 0)  // v freezes now: √(v / bc2) ≥ v_floor from here on
    for (auto& s : slots_) s.exp_avg_sq.clamp_min_(v_floor_ * v_floor_ * bc2_sqrt * bc2_sqrt);
  adam_moments(slots_, beta1_, beta2_, /*second_moment=*/!compressed);  // compressed: the local momentum
  if (compressed) compressed_allreduce_mean(dp_, *onebit_, flat_exp_avg_, feedback_, "1-bit Adam momentum");
  adam_apply(slots_, lr, bc1, bc2_sqrt, eps_, wd_);
}

std::vector<std::pair<std::string, torch::Tensor>> OnebitAdam::rank_state() {
  return {{"worker", feedback_.worker}, {"server", feedback_.server}};
}

}  // namespace gridtrain
