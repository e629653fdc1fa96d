#include "gridtrain/app/router_stats.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gridtrain/model/language_model.hpp"

namespace gridtrain {

namespace {
LanguageModel& language_model(Model& m) {
  auto* lm = dynamic_cast<LanguageModel*>(&m);
  if (!lm) throw std::invalid_argument("RouterStats: MoE layers belong to a language model");
  return *lm;
}
}  // namespace

RouterStats::RouterStats(const FixContext& ctx)
    : grid_(ctx.grid), model_(language_model(ctx.model)), experts_(ctx.cfg.moe.experts),
      capacity_(ctx.cfg.moe.capacity_factor > 0) {
  for (int i = 0; i < ctx.cfg.model.n_layer; ++i)
    if (ctx.cfg.moe.on(i)) layers_.push_back(i);
}

// Device operations only: the figures stay on the device until the thermo line. On the last
// stage, whose router log holds every stage's sums.
torch::Tensor RouterStats::on_loss(long long, torch::Tensor loss) {
  const auto& log = model_.routers();
  torch::NoGradGuard no_grad;
  const auto aux = log.aux_loss().detach(), z = log.z_loss().detach();
  aux_ = aux_.defined() ? aux_ + aux : aux;
  z_ = z_.defined() ? z_ + z : z;
  micro_batches_ += 1;
  return loss;
}

// Collective over the grid: tp rank 0 of every replica contributes, the last stage its balancing
// losses and every stage its layers' load (the other tp ranks hold the same figures again).
void RouterStats::columns(std::vector<ReportColumn>& out) {
  const bool mine = grid_.represents({AxisId::Tp});
  const bool losses = mine && micro_batches_ > 0;
  // [Σ aux, Σ z, micro-batches, dropped slots], then each layer's slots per expert.
  constexpr std::ptrdiff_t head = 4;
  std::vector<double> sums = {losses ? aux_.item<double>() : 0.0, losses ? z_.item<double>() : 0.0,
                              losses ? micro_batches_ : 0.0, 0.0};
  sums.resize(head + layers_.size() * static_cast<std::size_t>(experts_), 0.0);  // zeros for other stages' layers
  const auto layer_at = [&](std::size_t l) { return sums.begin() + head + static_cast<std::ptrdiff_t>(l) * experts_; };
  for (const auto& [layer, load] : model_.routers().take_load()) {
    if (!mine) continue;
    const auto l = static_cast<std::size_t>(std::lower_bound(layers_.begin(), layers_.end(), layer) - layers_.begin());
    const auto c = load.to(torch::kDouble).cpu();  // (E + 1,): slots per expert, dropped slots
    std::copy(c.data_ptr<double>(), c.data_ptr<double>() + experts_, layer_at(l));
    sums[3] += c.data_ptr<double>()[experts_];
  }
  grid_.world().blocking_sum(sums.data(), static_cast<int>(sums.size()), "router statistics");
  aux_ = z_ = torch::Tensor();
  micro_batches_ = 0;
  const double n = std::max(sums[2], 1.0);
  out.push_back({"moe_aux_loss", sums[0] / n, "moe/aux_loss", "Aux", sums[0] / n});
  out.push_back({"moe_z_loss", sums[1] / n, "moe/z_loss"});
  double worst = 0, slots = 0;
  std::vector<ReportColumn> per_layer;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const auto first = layer_at(l), last = first + experts_;
    double total = 0;
    for (auto it = first; it != last; ++it) total += *it;
    slots += total;
    const double ratio = total > 0 ? *std::max_element(first, last) / (total / static_cast<double>(experts_)) : 0.0;
    worst = std::max(worst, ratio);
    const std::string layer = std::to_string(layers_[l]);
    per_layer.push_back({"moe_max_load_" + layer, ratio, "moe/max_load_" + layer});
  }
  out.push_back({"moe_max_load", worst, "moe/max_load", "MaxLoad", worst});
  if (capacity_) {
    const double fraction = slots > 0 ? sums[3] / slots : 0.0;
    out.push_back({"moe_dropped", sums[3], "moe/dropped"});
    out.push_back({"moe_drop_fraction", fraction, "moe/drop_fraction", "Drop", fraction});
  }
  for (auto& c : per_layer) out.push_back(std::move(c));
}

}  // namespace gridtrain
