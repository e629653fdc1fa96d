#include "gridtrain/model/router.hpp"

#include <cmath>

#include <ATen/autocast_mode.h>

namespace gridtrain::moe {

Router::Router(std::int64_t n_embd, std::int64_t experts, std::int64_t top_k, MoeRouter type, bool norm_topk_prob,
               double expert_bias_rate)
    : top_k_(top_k), type_(type), norm_topk_prob_(norm_topk_prob) {
  // Drawn as torch::nn::Linear's weight is (the model's initialize() redraws it; a bare MoeMlp keeps it).
  weight = register_parameter("weight", torch::empty({experts, n_embd}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (expert_bias_rate <= 0) return;
  e_score_correction_bias = register_buffer("e_score_correction_bias", torch::zeros({experts}));
  tokens_per_expert = register_buffer("tokens_per_expert", torch::zeros({experts}));
}

Routing Router::forward(const torch::Tensor& x, std::int64_t T) {
  Routing r;
  {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    r.logits = torch::linear(x.to(torch::kFloat), weight.to(torch::kFloat));
  }
  const auto scores = type_ == MoeRouter::Sigmoid ? r.logits.sigmoid() : r.logits.softmax(-1);  // (N, E)
  r.probs = type_ == MoeRouter::Sigmoid ? scores / scores.sum(-1, /*keepdim=*/true) : scores;
  const std::int64_t N = x.size(0), E = weight.size(0);
  if (type_ == MoeRouter::Balanced) {
    const auto t = torch::arange(N, x.options().dtype(torch::kLong)).remainder(T).unsqueeze(1);  // (N, 1)
    r.chosen = (t * top_k_ + torch::arange(top_k_, t.options()).unsqueeze(0)).remainder(E);
  } else {
    // The bias moves the choice only; the weights stay the scores (no gradient reaches b).
    const auto choice = e_score_correction_bias.defined() ? scores.detach() + e_score_correction_bias : scores;
    r.chosen = std::get<1>(choice.topk(top_k_, -1));
  }
  r.weights = scores.gather(-1, r.chosen);  // (N, k)
  if (norm_topk_prob_) r.weights = r.weights / r.weights.sum(-1, /*keepdim=*/true);
  if (tokens_per_expert.defined() && torch::GradMode::is_enabled()) {
    torch::NoGradGuard no_grad;
    tokens_per_expert.index_add_(0, r.chosen.reshape({-1}), torch::ones({r.chosen.numel()}, tokens_per_expert.options()));
  }
  return r;
}

torch::Tensor expert_bias_step(const torch::Tensor& counts, double rate) {
  return (counts.mean(1, /*keepdim=*/true) - counts).sign() * rate;
}

void Router::to(torch::Dtype dtype, bool non_blocking) { weight.set_data(weight.to(dtype, non_blocking)); }

void Router::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(device, non_blocking);
  to(dtype, non_blocking);
}

}  // namespace gridtrain::moe
