#include "gridtrain/parallel/reducer.hpp"

#include <cmath>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

namespace gridtrain {
namespace {

// Runs a callback after a gradient accumulator has written the parameter's .grad.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

}  // namespace

const char* describe(GradExchange e) {
  static constexpr std::array<const char*, static_cast<std::size_t>(GradExchange::kCount)> names = {
      "fp32 allreduce overlapped with backward", "fp32 allreduce after backward",
      "compressed exchange after backward", "local (the optimizer exchanged its state)"};
  return names[static_cast<std::size_t>(e)];
}

Reducer::Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap, Compression compression)
    : dp_(dp), overlap_(overlap && compression == Compression::None && dp.size() > 1), params_(std::move(params)),
      bucket_of_(params_.size()) {
  if (compression != Compression::None)
    compressor_ = make_compressor(compression == Compression::Fp16 ? CompressorKind::Fp16 : CompressorKind::Bf16,
                                  memory_of(params_.at(0)));
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  // Group in reverse registration order: backward produces the last layers' gradients first.
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t filled = 0;
  for (std::size_t i = params_.size(); i-- > 0;) {
    if (groups.empty() || (filled > 0 && filled + params_[i].numel() > cap)) groups.emplace_back(), filled = 0;
    groups.back().push_back(i);
    filled += params_[i].numel();
  }
  for (std::size_t b = 0; b < groups.size(); ++b) {
    std::int64_t n = 0;
    for (auto i : groups[b]) n += params_[i].numel();
    auto bucket = torch::zeros({n}, params_[groups[b].front()].options());  // fp32, on the parameters' device
    std::int64_t offset = 0;
    for (auto i : groups[b]) {
      auto& p = params_[i];
      p.mutable_grad() = bucket.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
      bucket_of_[i] = b;
    }
    buckets_.push_back(bucket);
    bucket_size_.push_back(static_cast<int>(groups[b].size()));
  }
  pending_ = bucket_size_;
  work_.resize(buckets_.size());
  feedback_.resize(buckets_.size());
  if (overlap_) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
      const auto key = acc->add_post_hook(std::make_unique<ReadyHook>([this, b = bucket_of_[i]] { mark_ready(b); }));
      hooks_.emplace_back(acc, key);  // holding the accumulator keeps the hook's node alive
    }
  }
}

Reducer::~Reducer() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void Reducer::zero_grad(bool local_gradients) {
  for (auto& b : buckets_) b.zero_();
  exchange_ = local_gradients ? GradExchange::Local
              : compressor_   ? GradExchange::Compressed
              : overlap_      ? GradExchange::Overlapped
                              : GradExchange::Blocking;
  // A step that fails before its first backward (out of memory) must still start every bucket
  // in finish(), like the ranks that got further.
  begin_backward(false);
  bytes_ = 0;
}

void Reducer::begin_backward(bool last) {
  communicating_ = last && exchange_ != GradExchange::Local;
  pending_ = bucket_size_;
  next_ = 0;
}

void Reducer::mark_ready(std::size_t bucket) {
  if (!communicating_) return;
  --pending_[bucket];
  while (next_ < buckets_.size() && pending_[next_] == 0) start(next_++);
  for (std::size_t b = 0; b < next_; ++b) work_[b].test();  // drive progress of earlier buckets
}

void Reducer::start(std::size_t bucket) {
  if (bytes_ == 0) in_flight_.restart();
  auto& b = buckets_[bucket];
  const auto n = static_cast<std::size_t>(b.numel());
  bytes_ += 2 * (dp_.size() - 1) * n * sizeof(float) / dp_.size();
  work_[bucket] = dp_.allreduce_sum(b.data_ptr<float>(), n, "gradient bucket " + std::to_string(bucket));
}

void Reducer::finish() {
  ++stats_.steps[static_cast<std::size_t>(exchange_)];
  if (exchange_ == GradExchange::Local || dp_.size() == 1) return;
  const Stopwatch exposed;
  if (compressor_) {
    in_flight_.restart();
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      bytes_ += compressed_allreduce_mean(dp_, *compressor_, buckets_[b], feedback_[b],
                                          "gradient bucket " + std::to_string(b));
  } else {
    while (next_ < buckets_.size()) start(next_++);
    const double inv = 1.0 / dp_.size();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      work_[b].wait();
      buckets_[b].mul_(inv);
    }
    communicating_ = false;
  }
  stats_.in_flight_s += in_flight_.seconds();
  stats_.exposed_s += exposed.seconds();
}

void Reducer::scale(double factor) {
  for (auto& b : buckets_) b.mul_(factor);
}

}  // namespace gridtrain
