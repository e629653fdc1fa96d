#include "gridtrain/model/moe.hpp"

#include <algorithm>

#include "gridtrain/precision/matmul.hpp"

namespace gridtrain::moe {

bool MoeShape::on(std::int64_t layer) const { return std::binary_search(layers.begin(), layers.end(), layer); }

std::vector<std::string> MoeShape::mlp_names() const {
  std::vector<std::string> out = {"gate.weight"};
  for (std::int64_t e = 0; e < experts; ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      out.push_back("experts." + std::to_string(e) + "." + p + ".weight");
  if (shared_ffn_hidden > 0)
    for (const char* p : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                          "shared_expert_gate"})
      out.push_back(std::string(p) + ".weight");
  return out;
}

void RouterLog::add(const torch::Tensor& logits, const torch::Tensor& probs, const torch::Tensor& chosen) {
  const auto counts = torch::zeros({experts_}, probs.options())
                          .index_add_(0, chosen.reshape({-1}), torch::ones({chosen.numel()}, probs.options()));
  layers_.push_back({counts, probs.sum(0), logits.logsumexp(-1).square().sum(), logits.size(0)});
}

torch::Tensor RouterLog::aux_loss() const {
  torch::Tensor counts = layers_.at(0).counts, prob_sum = layers_[0].prob_sum;
  double rows = static_cast<double>(layers_[0].rows);
  for (std::size_t l = 1; l < layers_.size(); ++l)
    counts = counts + layers_[l].counts, prob_sum = prob_sum + layers_[l].prob_sum, rows += layers_[l].rows;
  return static_cast<double>(experts_) * (counts / rows * (prob_sum / rows)).sum();
}

torch::Tensor RouterLog::z_loss() const {
  torch::Tensor sum = layers_.at(0).z_sum;
  double rows = static_cast<double>(layers_[0].rows);
  for (std::size_t l = 1; l < layers_.size(); ++l) sum = sum + layers_[l].z_sum, rows += layers_[l].rows;
  return sum / rows;
}

torch::Tensor RouterLog::loss() const {
  auto out = aux_coeff_ * aux_loss();
  return z_coeff_ > 0.0 ? out + z_coeff_ * z_loss() : out;
}

MoeMlp::MoeMlp(std::int64_t n_embd, const MoeShape& s, const MakeExpert& make_expert, RouterLog* log)
    : top_k_(s.top_k), norm_topk_prob_(s.norm_topk_prob), log_(log) {
  auto bias_free = [](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  gate_ = register_module("gate", bias_free(n_embd, s.experts));
  auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
  for (std::int64_t e = 0; e < s.experts; ++e)
    experts_.push_back(experts->register_module(std::to_string(e), make_expert(s.ffn_hidden)));
  if (s.shared_ffn_hidden == 0) return;
  shared_expert_ = register_module("shared_expert", make_expert(s.shared_ffn_hidden));
  shared_expert_gate_ = register_module("shared_expert_gate", bias_free(n_embd, 1));
}

torch::Tensor MoeMlp::forward(const torch::Tensor& x) {
  const auto flat = x.reshape({-1, x.size(-1)});  // (N, C)
  torch::Tensor logits;                           // (N, E), fp32 whatever autocast computes the rest in
  {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    logits = torch::linear(flat.to(torch::kFloat), gate_->weight.to(torch::kFloat));
  }
  const auto probs = logits.softmax(-1);
  auto [weights, chosen] = probs.topk(top_k_, -1);  // (N, k) each
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (log_) log_->add(logits, probs, chosen);
  auto out = torch::zeros(flat.sizes(), flat.options().dtype(torch::kFloat));
  for (std::size_t e = 0; e < experts_.size(); ++e) {
    // Every expert runs, on no rows if none chose it, so that each gets a gradient every step.
    const auto hit = (chosen == static_cast<std::int64_t>(e)).nonzero();  // (n_e, 2): row, slot, by row
    const auto rows = hit.select(1, 0), slots = hit.select(1, 1);
    const auto y = experts_[e]->forward(flat.index_select(0, rows)).to(torch::kFloat);  // (n_e, C)
    out = out.index_add(0, rows, y * weights.index({rows, slots}).unsqueeze(1));
  }
  if (shared_expert_)
    out = out + (torch::sigmoid(dense(flat, shared_expert_gate_->weight)) * shared_expert_->forward(flat)).to(torch::kFloat);
  return out.to(x.scalar_type()).view(x.sizes());
}

}  // namespace gridtrain::moe
