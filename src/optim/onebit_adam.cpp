#include <cmath>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/optim/optimizer.hpp"

namespace gridtrain {

OnebitAdam::OnebitAdam(std::vector<NamedParameter> params, Axis& dp, double beta1, double beta2, double eps,
                       double weight_decay, long long freeze_step)
    : dp_(dp), onebit_(make_compressor("onebit")), beta1_(beta1), beta2_(beta2), eps_(eps), wd_(weight_decay),
      freeze_(freeze_step) {
  std::int64_t n = 0;
  for (auto& p : params) n += p.param.numel();
  flat_exp_avg_ = torch::zeros({n}, torch::kFloat32);
  std::int64_t offset = 0;
  for (auto& p : params) {
    auto m = flat_exp_avg_.narrow(0, offset, p.param.numel()).view(p.param.sizes());
    offset += p.param.numel();
    slots_.push_back({p, m, torch::zeros_like(p.param), p.param.dim() >= 2});
  }
  // Residuals sized up front so that checkpoints always hold them (worker: N padded to a
  // multiple of dp; server: one chunk).
  const auto p = static_cast<std::size_t>(dp_.size());
  const std::size_t chunk = (static_cast<std::size_t>(n) + p - 1) / p;
  feedback_.worker.assign(chunk * p, 0.0f);
  feedback_.server.assign(chunk, 0.0f);
}

void OnebitAdam::step(double lr) {
  torch::NoGradGuard no_grad;
  const bool compressed = owns_communication();  // decided before the count advances
  ++steps_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  // The second moment stops at the freeze step, and so does its bias correction.
  const double t2 = static_cast<double>(compressed ? freeze_ : steps_);
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2_, t2));
  for (auto& s : slots_) {
    s.exp_avg.lerp_(s.p.param.grad(), 1.0 - beta1_);  // with compression: the local momentum
    if (!compressed) s.exp_avg_sq.mul_(beta2_).addcmul_(s.p.param.grad(), s.p.param.grad(), 1.0 - beta2_);
  }
  bytes_ = compressed ? compressed_allreduce_mean(dp_, *onebit_, flat_exp_avg_.data_ptr<float>(),
                                                 static_cast<std::size_t>(flat_exp_avg_.numel()), feedback_,
                                                 "1-bit Adam momentum")
                     : 0;
  for (auto& s : slots_) adam_apply(s, lr, bc1, bc2_sqrt, eps_, wd_);
}

std::vector<std::pair<std::string, std::vector<float>*>> OnebitAdam::rank_state() {
  return {{"worker", &feedback_.worker}, {"server", &feedback_.server}};
}

}  // namespace gridtrain
