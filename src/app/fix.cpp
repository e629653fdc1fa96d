#include "gridtrain/app/fix.hpp"

#include "gridtrain/app/expert_bias.hpp"
#include "gridtrain/app/faults.hpp"
#include "gridtrain/app/replica_state.hpp"
#include "gridtrain/app/router_stats.hpp"
#include "gridtrain/app/sparsity_fix.hpp"

namespace gridtrain {

std::vector<std::unique_ptr<Fix>> make_fixes(const FixContext& ctx) {
  std::vector<std::unique_ptr<Fix>> fixes;
  if (Faults::wanted(ctx.cfg.debug)) fixes.push_back(std::make_unique<Faults>(ctx.cfg.debug, ctx.grid.world(), ctx.step_bytes, ctx.checkpointer));
  if (ctx.cfg.sparsity.enabled()) fixes.push_back(std::make_unique<SparsityFix>(ctx));
  if (ctx.cfg.moe.enabled()) fixes.push_back(std::make_unique<RouterStats>(ctx));
  if (ctx.cfg.moe.expert_bias_rate > 0) fixes.push_back(std::make_unique<ExpertBias>(ctx));
  else SparsityFix::ignore_masks(ctx.checkpointer);
  std::vector<torch::Tensor> replica;
  for (auto& [name, t] : ctx.model.replica_state()) replica.push_back(t);  // updated in place: held once
  if (!replica.empty()) fixes.push_back(std::make_unique<ReplicaState>(std::move(replica), ctx.grid.dp()));
  return fixes;
}

void Fixes::describe(Log& log) const {
  for (const auto& f : fixes_) f->describe(log);
}

void Fixes::step_begin(long long s) {
  for (auto& f : fixes_) f->step_begin(s);
}

void Fixes::before_forward(long long s) {
  for (auto& f : fixes_) f->before_forward(s);
}

torch::Tensor Fixes::on_loss(long long s, torch::Tensor loss) {
  for (auto& f : fixes_) loss = f->on_loss(s, std::move(loss));
  return loss;
}

void Fixes::after_exchange(long long s, const std::vector<torch::Tensor>& grads) {
  for (auto& f : fixes_) f->after_exchange(s, grads);
}

void Fixes::after_update(long long s) {
  for (auto& f : fixes_) f->after_update(s);
}

void Fixes::on_skip(long long s) {
  for (auto& f : fixes_) f->on_skip(s);
}

std::vector<ReportColumn> Fixes::columns() {
  std::vector<ReportColumn> out;
  for (auto& f : fixes_) f->columns(out);
  return out;
}

std::vector<ReportSection> Fixes::summary(const std::string& item) {
  std::vector<ReportSection> out;
  for (auto& f : fixes_) f->summary(out, item);
  return out;
}

double Fixes::state_bytes() const {
  double bytes = 0;
  for (const auto& f : fixes_) bytes += f->state_bytes();
  return bytes;
}

}  // namespace gridtrain
