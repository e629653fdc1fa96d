#include "gridtrain/app/expert_bias.hpp"

#include "gridtrain/model/router.hpp"

namespace gridtrain {

ExpertBias::ExpertBias(const FixContext& ctx) : dp_(ctx.grid.dp_cp()), rate_(ctx.cfg.moe.expert_bias_rate) {
  for (const auto& b : ctx.model.named_buffers(true)) {
    if (b.key().ends_with(".gate.e_score_correction_bias")) biases_.push_back(b.value());
    if (b.key().ends_with(".gate.tokens_per_expert")) counts_.push_back(b.value());
  }
}

void ExpertBias::describe(Log& log) const {
  log.print("moe: expert bias (auxiliary-loss-free balancing), moved by " + fmt("%g", rate_) +
            " after each step towards the mean load\n");
}

void ExpertBias::after_update(long long) {
  if (biases_.empty()) return;
  torch::NoGradGuard no_grad;
  auto counts = torch::stack(counts_);  // (L, E), fp32 integers: exact below 2^24 slots
  dp_.allreduce_sum(counts.data_ptr<float>(), static_cast<std::size_t>(counts.numel()), "expert load").wait();
  const auto step = moe::expert_bias_step(counts, rate_);
  for (std::size_t l = 0; l < biases_.size(); ++l) {
    biases_[l].add_(step[static_cast<std::int64_t>(l)]);
    counts_[l].zero_();
  }
}

void ExpertBias::on_skip(long long) {
  for (auto& c : counts_) c.zero_();
}

}  // namespace gridtrain
