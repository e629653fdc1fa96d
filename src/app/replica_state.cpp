#include "gridtrain/app/replica_state.hpp"

namespace gridtrain {

void ReplicaState::step_begin(long long) {
  before_.clear();
  for (const auto& t : tensors_) before_.push_back(t.clone());
}

void ReplicaState::on_skip(long long) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < before_.size(); ++i) tensors_[i].copy_(before_[i]);
}

void ReplicaState::after_update(long long) {
  if (dp_.size() == 1) return;
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors_) flat.push_back(t.reshape({-1}));
  auto all = torch::cat(flat);
  dp_.allreduce_sum(all.data_ptr<float>(), static_cast<std::size_t>(all.numel()), "batch-norm statistics").wait();
  all.div_(dp_.size());
  std::int64_t at = 0;
  torch::NoGradGuard no_grad;
  for (auto& t : tensors_) {
    t.copy_(all.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
}

}  // namespace gridtrain
