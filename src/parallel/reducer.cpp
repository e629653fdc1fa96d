#include "gridtrain/parallel/reducer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

Reducer::Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap, Compression compression,
                 int zero_stage, std::ptrdiff_t own_bucket)
    : dp_(dp), overlap_(overlap && compression == Compression::None && dp.size() > 1), params_(std::move(params)),
      zero_stage_(dp.size() > 1 ? zero_stage : 0), bucket_of_(params_.size()), offset_(params_.size()) {
  if (zero_stage_ > 0 && compression != Compression::None)
    throw std::invalid_argument("Reducer: ZeRO reduce-scatters fp32 gradients; compression must be none");
  if (compression != Compression::None)
    compressor_ = make_compressor(compression == Compression::Fp16 ? CompressorKind::Fp16 : CompressorKind::Bf16,
                                  memory_of(params_.at(0)));
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  // Group in reverse registration order: backward produces the last layers' gradients first.
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t filled = 0;
  for (std::size_t i = params_.size(); i-- > 0;) {
    const bool alone = static_cast<std::ptrdiff_t>(i) == own_bucket;
    if (groups.empty() || alone || (filled > 0 && filled + params_[i].numel() > cap) ||
        static_cast<std::ptrdiff_t>(groups.back().back()) == own_bucket)
      groups.emplace_back(), filled = 0;
    groups.back().push_back(i);
    filled += params_[i].numel();
  }
  const std::int64_t dp_size = zero_stage_ > 0 ? dp.size() : 1;
  for (std::size_t b = 0; b < groups.size(); ++b) {
    std::int64_t n = 0;
    for (auto i : groups[b]) {
      bucket_of_[i] = b;
      offset_[i] = n;
      n += params_[i].numel();
    }
    bucket_numel_.push_back((n + dp_size - 1) / dp_size * dp_size);  // ZeRO: padded to equal shards
    bucket_size_.push_back(static_cast<int>(groups[b].size()));
  }
  allocate_gradients();
  if (zero_stage_ > 0) {
    torch::NoGradGuard no_grad;
    for (std::size_t b = 0; b < groups.size(); ++b) {
      flat_params_.push_back(torch::zeros({bucket_numel_[b]}, params_[groups[b].front()].options()));
      shards_.push_back(torch::zeros({shard_size(b)}, flat_params_.back().options()));
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {  // the parameters become views of their bucket
      auto& p = params_[i];
      auto view = flat_params_[bucket_of_[i]].narrow(0, offset_[i], p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
    }
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

void Reducer::allocate_gradients() {
  buckets_.resize(bucket_numel_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    buckets_[b] = torch::zeros({bucket_numel_[b]}, params_.front().options().requires_grad(false));
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].mutable_grad() = buckets_[bucket_of_[i]].narrow(0, offset_[i], params_[i].numel()).view(params_[i].sizes());
}

Reducer::~Reducer() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void Reducer::zero_grad(bool local_gradients) {
  if (!buckets_.front().defined()) allocate_gradients();  // stage 2 freed them
  else
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
  const std::string label = "gradient bucket " + std::to_string(bucket);
  const std::uint64_t before = dp_.bytes_sent();
  if (zero_stage_ > 0)
    work_[bucket] = dp_.reduce_scatter_sum(b.data_ptr<float>(), shards_[bucket].data_ptr<float>(),
                                           static_cast<std::size_t>(shard_size(bucket)), label);
  else
    work_[bucket] = dp_.allreduce_sum(b.data_ptr<float>(), static_cast<std::size_t>(b.numel()), label);
  bytes_ += dp_.bytes_sent() - before;
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
      (zero_stage_ > 0 ? shards_[b] : buckets_[b]).mul_(inv);
    }
    communicating_ = false;
    if (zero_stage_ >= 2) {  // only the shards are needed from here on
      for (auto& p : params_) p.mutable_grad().reset();
      for (auto& b : buckets_) b.reset();
    }
  }
  stats_.in_flight_s += in_flight_.seconds();
  stats_.exposed_s += exposed.seconds();
}

void Reducer::scale(double factor) {
  for (auto& b : zero_stage_ > 0 ? shards_ : buckets_) b.mul_(factor);
}

std::pair<std::int64_t, std::int64_t> Reducer::shard_range(std::size_t i) const {
  const std::int64_t s = shard_size(bucket_of_[i]), r = dp_.rank();
  return {std::clamp(offset_[i], r * s, (r + 1) * s), std::clamp(offset_[i] + params_[i].numel(), r * s, (r + 1) * s)};
}

std::vector<ShardPiece> Reducer::shard_pieces() const {
  std::vector<ShardPiece> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto [lo, hi] = shard_range(i);
    ShardPiece piece{flat_params_[bucket_of_[i]].narrow(0, lo, hi - lo), hi > lo ? lo - offset_[i] : 0};
    piece.param.mutable_grad() = reduced_gradient(i);
    out.push_back(std::move(piece));
  }
  return out;
}

torch::Tensor Reducer::reduced_gradient(std::size_t i) const {
  if (zero_stage_ == 0) return params_.at(i).grad();
  const auto [lo, hi] = shard_range(i);
  const std::size_t b = bucket_of_[i];
  return shards_[b].narrow(0, lo - static_cast<std::int64_t>(dp_.rank()) * shard_size(b), hi - lo);
}

void Reducer::gather_parameters() {
  if (zero_stage_ == 0 || dp_.size() == 1) return;
  const std::uint64_t before = dp_.bytes_sent();
  std::vector<Work> gathers;
  for (std::size_t b = 0; b < flat_params_.size(); ++b) {
    const auto bytes = static_cast<std::size_t>(shard_size(b)) * sizeof(float);
    auto* flat = static_cast<char*>(flat_params_[b].data_ptr());
    gathers.push_back(dp_.all_gather(flat + dp_.rank() * bytes, flat, bytes, "parameter bucket " + std::to_string(b)));
  }
  for (auto& w : gathers) w.wait();
  bytes_ += dp_.bytes_sent() - before;
}

std::uint64_t Reducer::gradient_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : buckets_) n += t.defined() ? t.nbytes() : 0;
  for (const auto& t : shards_) n += t.nbytes();
  return n;
}

std::uint64_t Reducer::parameter_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : flat_params_) n += t.nbytes();
  return n;
}

}  // namespace gridtrain
