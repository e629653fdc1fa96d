#include "gridtrain/parallel/reducer.hpp"

#include <cmath>

namespace gridtrain {

Reducer::Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb)
    : dp_(dp), params_(std::move(params)) {
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  // Group in reverse registration order: backward produces the last layers' gradients first.
  std::vector<std::vector<torch::Tensor>> groups;
  std::int64_t filled = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    if (groups.empty() || (filled > 0 && filled + it->numel() > cap)) groups.emplace_back(), filled = 0;
    groups.back().push_back(*it);
    filled += it->numel();
  }
  for (auto& group : groups) {
    std::int64_t n = 0;
    for (auto& p : group) n += p.numel();
    auto bucket = torch::zeros({n}, torch::kFloat32);
    std::int64_t offset = 0;
    for (auto& p : group) {
      p.mutable_grad() = bucket.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
    }
    buckets_.push_back(bucket);
  }
}

void Reducer::zero_grad() {
  for (auto& b : buckets_) b.zero_();
}

void Reducer::allreduce() {
  if (dp_.size() == 1) return;
  std::vector<Work> work;
  work.reserve(buckets_.size());
  for (auto& b : buckets_) work.push_back(dp_.allreduce_sum(b.data_ptr<float>(), static_cast<std::size_t>(b.numel())));
  const double inv = 1.0 / dp_.size();
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    work[i].wait();
    buckets_[i].mul_(inv);
  }
}

double Reducer::grad_norm() const {
  double sq = 0.0;
  for (const auto& b : buckets_) {
    const double n = b.norm().item<double>();  // fp32 kernel with blocked accumulation, no fp64 copy
    sq += n * n;
  }
  return std::sqrt(sq);
}

void Reducer::scale(double factor) {
  for (auto& b : buckets_) b.mul_(factor);
}

}  // namespace gridtrain
