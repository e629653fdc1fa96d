#include "gridtrain/optim/parameter_stack.hpp"

#include <algorithm>
#include <stdexcept>

namespace gridtrain {

ParameterStack::ParameterStack(const Config& cfg, Model& model, std::vector<ParameterGroup> groups,
                               const std::function<std::size_t(const std::string&)>& group_of, const Axis& dp,
                               int tp_rank, const std::vector<torch::Tensor>& initial) {
  if (cfg.optim.type == OptimizerType::OnebitAdam && groups.size() > 1)
    throw std::invalid_argument("ParameterStack: 1-bit Adam exchanges its state over dp; it takes one parameter "
                                "group, got " + std::to_string(groups.size()));
  const auto tied_names = model.tied_parameters();
  std::vector<torch::Tensor> params;
  std::vector<std::size_t> group_index;
  ZeroOptions zero{cfg.optim.zero_stage, {}, cfg.optim.zero_prefetch};
  for (auto& p : model.named_parameters(true)) {
    const auto tie = std::find(tied_names.begin(), tied_names.end(), p.key());
    const int tie_index = tie == tied_names.end() ? -1 : static_cast<int>(tie - tied_names.begin());
    // Stage 3 gathers the model's units; below, each tied parameter gets a bucket of its own.
    zero.unit_of.push_back(zero.stage == 3 ? model.unit_of(p.key()) : tie_index);
    pieces_.push_back({p.key(), p.value()});
    params.push_back(p.value());
    group_index.push_back(group_of(p.key()));
    if (model.shard(p.key()).counted_on(tp_rank)) counted_.push_back(params.size() - 1);
  }
  for (const auto& name : tied_names) {  // in the model's order: the same on every stage that holds them
    const auto it = std::find_if(pieces_.begin(), pieces_.end(), [&](const NamedParameter& n) { return n.name == name; });
    if (it == pieces_.end()) throw std::logic_error("Model::tied_parameters names '" + name + "', which this rank lacks");
    tied_.push_back(static_cast<std::size_t>(it - pieces_.begin()));
  }
  const Config::Comm& comm = cfg.comm;
  // zb-h1's deferred weight gradients arrive after later micro-batches' backward passes began, so
  // no bucket can tell, by its hooks, that it is complete: the exchange runs after backward.
  const bool overlap = comm.overlap && cfg.train.schedule != PipelineSchedule::ZbH1;
  groups_ = std::make_unique<ParameterGroups>(params, group_index, std::move(groups), dp, comm.bucket_mb, overlap,
                                              comm.compression, zero);
  if (groups_->any_sharded()) {  // the optimizer updates this rank's pieces only
    const auto shards = groups_->shard_pieces();
    for (std::size_t i = 0; i < pieces_.size(); ++i)
      if (shards[i].param.defined()) pieces_[i] = {pieces_[i].name, shards[i].param, pieces_[i].param.sizes().vec(), shards[i].offset};
  }
  if (groups_->zero_stage() == 3) model.set_parameter_gather(groups_.get());
  if (!initial.empty()) {  // the optimizer updates fp32 masters of the pieces, the weights of record
    masters_ = std::make_unique<MasterWeights>(pieces_, initial);
    pieces_ = masters_->masters();
  }
}

std::vector<torch::Tensor> ParameterStack::reduced_gradients() const {
  std::vector<torch::Tensor> grads;
  for (std::size_t i = 0; i < pieces_.size(); ++i) grads.push_back(groups_->reduced_gradient(i));
  return grads;
}

void ParameterStack::load_gradients(double factor) {
  if (masters_) masters_->load_gradients(factor);  // unscaled and clipped in fp32
  else if (factor != 1.0) groups_->scale(factor);  // unscale and clip in one pass
}

void ParameterStack::publish() {
  if (masters_) masters_->publish();
  groups_->all_gather();  // ZeRO stages 1-2: every rank's pieces to every rank of its group
}

}  // namespace gridtrain
