// What the routers of a mixture-of-experts model did (G22 §4), as a step fix (app/fix.hpp): the
// balancing losses and the load per expert of every micro-batch since the last thermo line,
// summed over the data-parallel ranks, reported as the thermo line's Aux and MaxLoad columns and
// metrics.jsonl's and TensorBoard's moe_* figures:
//   moe_aux_loss, moe_z_loss  the mean over those micro-batches of RouterLog::aux_loss (k at
//                             perfect balance) and z_loss, unweighted by their coefficients;
//   moe_max_load              the largest over MoE layers of max_e / mean_e of the tokens routed
//                             to expert e over all ranks (1 at perfect balance, E/k at collapse);
//   moe_max_load_<layer>      that ratio for each MoE layer, by global layer index;
// and with a capacity factor (moe.capacity_factor > 0; dropless routing drops nothing):
//   moe_dropped               the routed slots (token, expert) that capacity dropped, over all
//                             MoE layers and ranks;
//   moe_drop_fraction         their fraction of all routed slots (the thermo line's Drop column).
#pragma once
#include <cstdint>
#include <vector>

#include "gridtrain/app/fix.hpp"

namespace gridtrain {

class LanguageModel;

class RouterStats final : public Fix {
 public:
  /// ctx.model is a LanguageModel with MoE layers (moe.experts > 0).
  explicit RouterStats(const FixContext& ctx);
  torch::Tensor on_loss(long long s, torch::Tensor loss) override;
  void columns(std::vector<ReportColumn>& out) override;

 private:
  Grid& grid_;
  LanguageModel& model_;
  std::int64_t experts_;
  bool capacity_;  // moe.capacity_factor > 0: the dropped slots are reported
  std::vector<std::int64_t> layers_;  // the MoE layers' global indices, on every stage
  // Since the last columns(): Σ aux, Σ z over the last stage's micro-batches, and their count
  // (each layer's load the router log keeps).
  torch::Tensor aux_, z_;
  double micro_batches_ = 0;
};

}  // namespace gridtrain
