#include "gridtrain/parallel/replica_state.hpp"

namespace gridtrain {

std::vector<torch::Tensor> ReplicaState::snapshot() const {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors_) out.push_back(t.clone());
  return out;
}

void ReplicaState::restore(const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < saved.size(); ++i) tensors_[i].copy_(saved[i]);
}

void ReplicaState::average() {
  if (tensors_.empty() || dp_.size() == 1) return;
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
