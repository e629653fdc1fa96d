#include "gridtrain/model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <ATen/autocast_mode.h>

#include "gridtrain/precision/matmul.hpp"

namespace gridtrain::moe {

bool MoeShape::on(std::int64_t layer) const { return std::binary_search(layers.begin(), layers.end(), layer); }

double MoeShape::active_mlp_params(std::int64_t n_embd) const {
  const double C = static_cast<double>(n_embd), F_s = static_cast<double>(shared_ffn_hidden);
  return C * static_cast<double>(experts) + 3.0 * C * static_cast<double>(top_k * ffn_hidden) + 3.0 * C * F_s +
         (F_s > 0 ? C : 0.0);
}

std::vector<std::string> MoeShape::mlp_names(std::int64_t first, std::int64_t count) const {
  std::vector<std::string> out = {"gate.weight"};
  for (std::int64_t e = first; e < (count < 0 ? experts : first + count); ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      out.push_back("experts." + std::to_string(e) + "." + p + ".weight");
  if (shared_ffn_hidden > 0)
    for (const char* p : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                          "shared_expert_gate"})
      out.push_back(std::string(p) + ".weight");
  return out;
}

void RouterLog::start(const torch::Tensor& upstream) { sums_ = upstream; }

void RouterLog::add(std::int64_t layer, const torch::Tensor& logits, const torch::Tensor& probs,
                    const torch::Tensor& chosen, const torch::Tensor& dropped) {
  const auto counts = torch::zeros({experts_}, probs.options())
                          .index_add_(0, chosen.reshape({-1}), torch::ones({chosen.numel()}, probs.options()));
  const auto rows = torch::full({1}, static_cast<double>(logits.size(0)), probs.options());
  const auto layer_sums = torch::cat({counts, probs.sum(0), logits.logsumexp(-1).square().sum().reshape({1}), rows});
  // 0 + x is x exactly: a first stage's sums equal those one stage would have.
  sums_ = sums_.defined() ? sums_ + layer_sums : layer_sums;
  if (!torch::GradMode::is_enabled()) return;  // validation or generation: not the training load
  const auto load = torch::cat({counts, dropped.defined() ? dropped.reshape({1}).to(counts.dtype())
                                                          : torch::zeros({1}, counts.options())});
  auto at = std::find_if(load_.begin(), load_.end(), [&](const auto& l) { return l.first >= layer; });
  if (at != load_.end() && at->first == layer) at->second = at->second + load;
  else load_.insert(at, {layer, load});
}

torch::Tensor RouterLog::part(std::int64_t first, std::int64_t n) const {
  if (!sums_.defined()) throw std::logic_error("RouterLog: no MoE layer has run in this micro-batch");
  return sums_.narrow(0, first, n);
}

torch::Tensor RouterLog::aux_loss() const {
  const auto rows = part(2 * experts_ + 1, 1).detach();
  const auto f = part(0, experts_).detach() / rows, p = part(experts_, experts_) / rows;
  return static_cast<double>(experts_) * (f * p).sum();
}

torch::Tensor RouterLog::z_loss() const { return (part(2 * experts_, 1) / part(2 * experts_ + 1, 1).detach()).squeeze(); }

torch::Tensor RouterLog::loss() const {
  auto out = aux_coeff_ * aux_loss();
  return z_coeff_ > 0.0 ? out + z_coeff_ * z_loss() : out;
}

std::vector<std::pair<std::int64_t, torch::Tensor>> RouterLog::take_load() { return std::exchange(load_, {}); }

torch::Tensor drop_over_capacity(const torch::Tensor& chosen, const torch::Tensor& weights, std::int64_t experts,
                                 double factor) {
  const std::int64_t n = chosen.size(0);
  const auto capacity = static_cast<std::int64_t>(std::ceil(factor * static_cast<double>(chosen.numel()) /
                                                            static_cast<double>(experts)));
  // score (N, E): a slot's weight where its token chose the expert, −1 (after every slot) elsewhere.
  const auto score = torch::full({n, experts}, -1.0, weights.options().dtype(torch::kFloat))
                         .scatter(1, chosen, weights.to(torch::kFloat));
  // rank (N, E): each token's place in its expert's queue, largest weight first, stable.
  const auto queue = std::get<1>(score.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  const auto rank = torch::empty_like(queue).scatter_(0, queue, torch::arange(n, queue.options()).unsqueeze(1).expand({n, experts}));
  return chosen.masked_fill(rank.gather(1, chosen) >= capacity, experts);
}

MoeMlp::MoeMlp(std::int64_t n_embd, const MoeShape& s, const MakeExpert& make_expert, RouterLog* log,
               std::int64_t layer, const EpRegion& region, const TpRegion& tp)
    : experts_total_(s.experts), layer_(layer), region_(region), tp_(tp), capacity_factor_(s.capacity_factor), log_(log) {
  gate_ = register_module("gate", std::make_shared<Router>(n_embd, s.experts, s.top_k, s.router, s.norm_topk_prob,
                                                           s.expert_bias_rate));
  auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
  const std::int64_t first = region.first(s.experts);
  for (std::int64_t e = first; e < first + region.local(s.experts); ++e)
    experts_.push_back(experts->register_module(std::to_string(e), make_expert(tp.local(s.ffn_hidden))));
  if (s.shared_ffn_hidden == 0) return;
  shared_expert_ = register_module("shared_expert", make_expert(tp.local(s.shared_ffn_hidden)));
  shared_expert_gate_ = register_module("shared_expert_gate",
                                        torch::nn::Linear(torch::nn::LinearOptions(n_embd, 1).bias(false)));
}

torch::Tensor MoeMlp::forward(const torch::Tensor& x) {
  const auto flat = x.reshape({-1, x.size(-1)});  // (N, C)
  const Routing r = gate_->forward(flat, x.dim() > 2 ? x.size(-2) : flat.size(0));
  const auto computed = capacity_factor_ > 0 ? drop_over_capacity(r.chosen, r.weights, experts_total_, capacity_factor_)
                                             : r.chosen;  // a dropped slot: expert E, which none is
  if (log_)
    log_->add(layer_, r.logits, r.probs, r.chosen,
              capacity_factor_ > 0 ? computed.eq(experts_total_).sum().to(torch::kFloat) : torch::Tensor());
  // Each token's experts ascending (dropped slots last): the combine's order.
  const auto [chosen, by_expert] = computed.sort(-1);
  const TokenDispatch dispatch(chosen, experts_total_, region_);
  // In autocast's dtype, which the experts compute in anyway: the exchange moves 2-byte rows.
  const auto type = flat.device().type();
  const auto compute = at::autocast::is_autocast_enabled(type) ? at::autocast::get_autocast_dtype(type) : flat.scalar_type();
  // f: each tp rank's experts give a partial input gradient, summed over tp.
  const auto in = tp_.copy_to(flat.to(compute));
  const auto rows = dispatch.dispatch(in);  // (M, C): this rank's experts' rows, expert-major
  std::vector<torch::Tensor> ys;
  std::int64_t at = 0;
  for (std::size_t j = 0; j < experts_.size(); ++j) {
    // Every expert runs, on no rows if none chose it, so that each gets a gradient every step.
    const auto n = dispatch.rows()[j];
    ys.push_back(experts_[j]->forward(rows.narrow(0, at, n)));
    at += n;
  }
  // The combine is linear in the expert outputs, so with expert tensor parallelism it sums this tp
  // rank's partial outputs; the weights' gradient, a product with them, is partial too (f).
  auto out = dispatch.combine(torch::cat(ys), tp_.copy_to(r.weights.gather(-1, by_expert)));  // (N, C) fp32
  if (shared_expert_) {
    const auto scale = tp_.copy_to(torch::sigmoid(dense(flat, shared_expert_gate_->weight)));
    out = out + (scale * shared_expert_->forward(in)).to(torch::kFloat);
  }
  return tp_.row(out).to(x.scalar_type()).view(x.sizes());  // g: the partial outputs summed over tp, in fp32
}

}  // namespace gridtrain::moe
