#include "gridtrain/parallel/reducer.hpp"

#include <algorithm>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include "gridtrain/parallel/element.hpp"

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
      "allreduce overlapped with backward", "allreduce after backward",
      "compressed exchange after backward", "local (the optimizer exchanged its state)"};
  return names[static_cast<std::size_t>(e)];
}

Reducer::Reducer(std::vector<torch::Tensor> params, std::shared_ptr<const BucketLayout> layout, Axis& dp, bool overlap,
                 Compression compression, int zero_stage, ParameterStorage* parameters)
    : dp_(dp), overlap_(overlap && compression == Compression::None && dp.size() > 1), params_(std::move(params)),
      layout_(std::move(layout)), zero_stage_(zero_stage), parameters_(parameters) {
  if (compression != Compression::None)
    compressor_ = make_compressor(compression == Compression::Fp16 ? CompressorKind::Fp16 : CompressorKind::Bf16,
                                  memory_of(params_.at(0)));
  const std::size_t n = layout_->buckets();
  buckets_.resize(n);
  if (zero_stage_ < 3)  // stage 3 allocates each unit's as its backward begins
    for (std::size_t b = 0; b < n; ++b) ensure_gradient(b);
  const std::int64_t r = dp_.rank();
  for (std::size_t b = 0; b < n && zero_stage_ > 0; ++b) {
    const std::int64_t s = layout_->shard_size(b);
    // Stage 1 keeps the whole bucket, so its shard is the rank's part of it.
    shards_.push_back(zero_stage_ == 1 ? buckets_[b].narrow(0, r * s, s) : torch::zeros({s}, params_.front().options()));
  }
  received_.resize(n);
  pending_.resize(n);
  work_.resize(n);
  feedback_.resize(n);
  note_peak();
  begin_backward(false);
  if (overlap_ || zero_stage_ == 3) {  // stage 3 frees a unit's parameters once its gradients are ready
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
      const auto key =
          acc->add_post_hook(std::make_unique<ReadyHook>([this, b = layout_->bucket_of(i)] { mark_ready(b); }));
      hooks_.emplace_back(acc, key);  // holding the accumulator keeps the hook's node alive
    }
  }
}

void Reducer::ensure_gradient(std::size_t b) {
  if (buckets_[b].defined()) return;
  buckets_[b] = torch::zeros({layout_->bucket_numel(b)}, params_.front().options().requires_grad(false));
  for (auto i : layout_->members(b))
    params_[i].mutable_grad() = buckets_[b].narrow(0, layout_->offset(i), params_[i].numel()).view(params_[i].sizes());
  note_peak();
}

void Reducer::free_gradient(std::size_t b) {
  for (auto i : layout_->members(b)) params_[i].mutable_grad().reset();
  buckets_[b].reset();
}

Reducer::~Reducer() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void Reducer::zero_grad(bool local_gradients) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].defined()) buckets_[b].zero_();
    else if (zero_stage_ < 3) ensure_gradient(b);  // stage 2 freed it; stage 3 allocates at its backward
  }
  exchange_ = local_gradients ? GradExchange::Local
              : compressor_   ? GradExchange::Compressed
              : overlap_      ? GradExchange::Overlapped
                              : GradExchange::Blocking;
  // A step that fails before its first backward (out of memory) must still start every bucket
  // in finish(), like the ranks that got further.
  begin_backward(false);
}

void Reducer::begin_backward(bool last) {
  communicating_ = last && exchange_ != GradExchange::Local;
  for (std::size_t b = 0; b < pending_.size(); ++b) pending_[b] = static_cast<int>(layout_->members(b).size());
  next_ = 0;
}

void Reducer::mark_ready(std::size_t bucket) {
  if (--pending_[bucket] == 0 && zero_stage_ == 3 && parameters_) parameters_->gradients_complete(bucket);
  if (!communicating_ || !overlap_) return;
  while (next_ < buckets_.size() && pending_[next_] == 0) start(next_++);
  poll();
}

void Reducer::poll() {
  for (std::size_t b = 0; b < next_; ++b)
    if (work_[b].test() && zero_stage_ >= 2 && buckets_[b].defined()) free_gradient(b);
}

void Reducer::start(std::size_t bucket) {
  if (bucket == 0) in_flight_.restart();  // buckets start in order
  ensure_gradient(bucket);  // stage 3: a step that failed before its backward
  auto& b = buckets_[bucket];
  const std::string label = "gradient bucket " + std::to_string(bucket);
  if (zero_stage_ > 0) {
    // MPI forbids an output inside the input, so stage 1 receives its shard aside (copied in finish).
    if (zero_stage_ == 1) received_[bucket] = torch::empty_like(shards_[bucket]);
    auto& out = zero_stage_ == 1 ? received_[bucket] : shards_[bucket];
    work_[bucket] = dp_.reduce_scatter_sum(b.data_ptr(), out.data_ptr(), static_cast<std::size_t>(layout_->shard_size(bucket)),
                                           element_of(b), label);
    note_peak();
  } else
    work_[bucket] = dp_.allreduce_sum(b.data_ptr(), static_cast<std::size_t>(b.numel()), element_of(b), label);
}

void Reducer::finish() {
  ++stats_.steps[static_cast<std::size_t>(exchange_)];
  if (exchange_ == GradExchange::Local || dp_.size() == 1) return;
  const Stopwatch exposed;
  if (compressor_) {
    in_flight_.restart();
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      compressed_allreduce_mean(dp_, *compressor_, buckets_[b], feedback_[b], "gradient bucket " + std::to_string(b));
  } else {
    while (next_ < buckets_.size()) start(next_++);
    const double inv = 1.0 / dp_.size();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      work_[b].wait();
      if (zero_stage_ == 1) {
        shards_[b].copy_(received_[b]);
        received_[b].reset();
      }
      (zero_stage_ > 0 ? shards_[b] : buckets_[b]).mul_(inv);
      if (zero_stage_ >= 2 && buckets_[b].defined()) free_gradient(b);  // only the shard is needed from here on
    }
    communicating_ = false;
  }
  stats_.in_flight_s += in_flight_.seconds();
  stats_.exposed_s += exposed.seconds();
}

void Reducer::scale(double factor) {
  for (auto& b : zero_stage_ > 0 ? shards_ : buckets_) b.mul_(factor);
}

const char* Reducer::gradient_dtype() const {
  switch (params_.front().scalar_type()) {
    case torch::kBFloat16: return "bf16";
    case torch::kHalf: return "fp16";
    default: return "fp32";
  }
}

torch::Tensor Reducer::reduced_gradient(std::size_t i) const {
  if (zero_stage_ == 0) return params_.at(i).grad();
  const int r = dp_.rank();
  const auto [lo, hi] = layout_->shard_range(i, r);
  const std::size_t b = layout_->bucket_of(i);
  return shards_[b].narrow(0, lo - r * layout_->shard_size(b), hi - lo);
}

void Reducer::note_peak() { gradient_peak_ = std::max(gradient_peak_, gradient_bytes()); }

std::uint64_t Reducer::gradient_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : buckets_) n += t.defined() ? t.nbytes() : 0;
  for (const auto& t : received_) n += t.defined() ? t.nbytes() : 0;
  if (zero_stage_ >= 2)  // stage 1's shards are parts of the buckets
    for (const auto& t : shards_) n += t.nbytes();
  return n;
}

}  // namespace gridtrain
