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
                 ZeroOptions zero)
    : dp_(dp), overlap_(overlap && compression == Compression::None && dp.size() > 1), params_(std::move(params)),
      zero_stage_(dp.size() > 1 ? zero.stage : 0), prefetch_(zero.prefetch), bucket_of_(params_.size()),
      offset_(params_.size()) {
  if (zero_stage_ > 0 && compression != Compression::None)
    throw std::invalid_argument("Reducer: ZeRO reduce-scatters fp32 gradients; compression must be none");
  if (compression != Compression::None)
    compressor_ = make_compressor(compression == Compression::Fp16 ? CompressorKind::Fp16 : CompressorKind::Bf16,
                                  memory_of(params_.at(0)));
  form_buckets(bucket_mb, zero.unit_of);
  if (zero_stage_ < 3) allocate_gradients();
  else buckets_.resize(members_.size());  // allocated as each unit's backward begins
  if (zero_stage_ > 0) flatten_parameters();
  pending_.resize(members_.size());
  begin_backward(false);
  work_.resize(buckets_.size());
  feedback_.resize(buckets_.size());
  if (overlap_ || zero_stage_ == 3) {  // stage 3 frees a unit's parameters once its gradients are ready
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
      const auto key = acc->add_post_hook(std::make_unique<ReadyHook>([this, b = bucket_of_[i]] { mark_ready(b); }));
      hooks_.emplace_back(acc, key);  // holding the accumulator keeps the hook's node alive
    }
  }
}

void Reducer::form_buckets(double bucket_mb, const std::vector<int>& unit_of) {
  auto unit = [&](std::size_t i) { return i < unit_of.size() ? unit_of[i] : -1; };
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  // Group in reverse registration order: backward produces the last layers' gradients first.
  std::int64_t filled = 0;
  for (std::size_t i = params_.size(); i-- > 0;) {
    if (zero_stage_ == 3 && unit(i) < 0)
      throw std::invalid_argument("Reducer: ZeRO stage 3 needs every parameter in a unit (parameter " +
                                  std::to_string(i) + " has none)");
    if (members_.empty() || unit(i) != unit(members_.back().back()) ||
        (unit(i) < 0 && filled > 0 && filled + params_[i].numel() > cap))
      members_.emplace_back(), filled = 0;
    members_.back().push_back(i);
    filled += params_[i].numel();
  }
  const std::int64_t dp_size = zero_stage_ > 0 ? dp_.size() : 1;
  for (std::size_t b = 0; b < members_.size(); ++b) {
    std::int64_t n = 0;
    for (auto i : members_[b]) {
      bucket_of_[i] = b;
      offset_[i] = n;
      n += params_[i].numel();
    }
    bucket_numel_.push_back((n + dp_size - 1) / dp_size * dp_size);  // ZeRO: padded to equal shards
    const int u = unit(members_[b].front());
    if (u < 0) continue;
    if (static_cast<std::size_t>(u) >= unit_bucket_.size()) unit_bucket_.resize(static_cast<std::size_t>(u) + 1, -1);
    if (unit_bucket_[static_cast<std::size_t>(u)] >= 0)
      throw std::invalid_argument("Reducer: the parameters of unit " + std::to_string(u) +
                                  " are not contiguous in registration order");
    unit_bucket_[static_cast<std::size_t>(u)] = static_cast<std::ptrdiff_t>(b);
  }
}

void Reducer::flatten_parameters() {
  torch::NoGradGuard no_grad;
  const std::int64_t r = dp_.rank();
  for (std::size_t b = 0; b < members_.size(); ++b) {
    const auto options = params_[members_[b].front()].options();
    flat_params_.push_back(torch::zeros({bucket_numel_[b]}, options));
    // Stage 1 keeps the whole bucket, so its shard is the rank's part of it.
    shards_.push_back(zero_stage_ == 1 ? buckets_[b].narrow(0, r * shard_size(b), shard_size(b))
                                       : torch::zeros({shard_size(b)}, options));
  }
  received_.resize(members_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {  // the parameters become views of their bucket
    auto& p = params_[i];
    auto view = flat_params_[bucket_of_[i]].narrow(0, offset_[i], p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
  }
  if (zero_stage_ == 3) {  // keep the shards; the units are gathered when the model uses them
    for (std::size_t b = 0; b < members_.size(); ++b)
      param_shards_.push_back(flat_params_[b].narrow(0, r * shard_size(b), shard_size(b)).clone());
    held_.assign(members_.size(), Held::Gathered);
    gathers_.resize(members_.size());
    release_all_parameters();
  }
  note_peaks();
}

void Reducer::allocate_gradients() {
  buckets_.resize(bucket_numel_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) allocate_gradient(b);
}

void Reducer::allocate_gradient(std::size_t b) {
  buckets_[b] = torch::zeros({bucket_numel_[b]}, params_.front().options().requires_grad(false));
  for (auto i : members_[b])
    params_[i].mutable_grad() = buckets_[b].narrow(0, offset_[i], params_[i].numel()).view(params_[i].sizes());
  note_peaks();
}

void Reducer::free_gradient(std::size_t b) {
  for (auto i : members_[b]) params_[i].mutable_grad().reset();
  buckets_[b].reset();
}

Reducer::~Reducer() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void Reducer::zero_grad(bool local_gradients) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].defined()) buckets_[b].zero_();
    else if (zero_stage_ < 3) allocate_gradient(b);  // stage 2 freed it; stage 3 allocates at its backward
  }
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
  for (std::size_t b = 0; b < members_.size(); ++b) pending_[b] = static_cast<int>(members_[b].size());
  next_ = 0;
}

void Reducer::mark_ready(std::size_t bucket) {
  if (--pending_[bucket] == 0 && zero_stage_ == 3) free_parameters(bucket);  // the unit's backward is done
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
  if (!buckets_[bucket].defined()) allocate_gradient(bucket);  // stage 3: a step that failed before its backward
  auto& b = buckets_[bucket];
  const std::string label = "gradient bucket " + std::to_string(bucket);
  const std::uint64_t before = dp_.bytes_sent();
  if (zero_stage_ > 0) {
    // MPI forbids an output inside the input, so stage 1 receives its shard aside (copied in finish).
    if (zero_stage_ == 1) received_[bucket] = torch::empty_like(shards_[bucket]);
    auto& out = zero_stage_ == 1 ? received_[bucket] : shards_[bucket];
    work_[bucket] = dp_.reduce_scatter_sum(b.data_ptr<float>(), out.data_ptr<float>(),
                                           static_cast<std::size_t>(shard_size(bucket)), label);
    note_peaks();
  } else
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
      if (zero_stage_ == 1) {
        shards_[b].copy_(received_[b]);
        received_[b].reset();
      }
      (zero_stage_ > 0 ? shards_[b] : buckets_[b]).mul_(inv);
      if (zero_stage_ >= 2 && buckets_[b].defined()) free_gradient(b);  // only the shard is needed from here on
    }
    communicating_ = false;
  }
  release_all_parameters();  // stage 3: units a failed step left gathered
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

torch::Tensor Reducer::own_parameters(std::size_t b) const {
  return zero_stage_ == 3 ? param_shards_[b] : flat_params_[b].narrow(0, dp_.rank() * shard_size(b), shard_size(b));
}

std::vector<ShardPiece> Reducer::shard_pieces() const {
  std::vector<ShardPiece> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto [lo, hi] = shard_range(i);
    const std::size_t b = bucket_of_[i];
    ShardPiece piece{own_parameters(b).narrow(0, lo - dp_.rank() * shard_size(b), hi - lo), hi > lo ? lo - offset_[i] : 0};
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
  if (zero_stage_ == 0 || zero_stage_ == 3) return;
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

// Stage 3. A freed flat parameter keeps its shape but its storage holds no bytes; gathering
// allocates the storage again in place, so every view of it (the model's parameters, the tensors
// autograd saved for backward) sees the gathered values.
namespace {

void free_storage(const torch::Tensor& t) { t.storage().unsafeGetStorageImpl()->reset(); }

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();  // flat, at offset 0
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

std::ptrdiff_t Reducer::find_unit(int unit) const {
  const auto u = static_cast<std::size_t>(unit);
  return unit < 0 || u >= unit_bucket_.size() ? -1 : unit_bucket_[u];
}

std::size_t Reducer::bucket_of_unit(int unit) const {
  const std::ptrdiff_t b = find_unit(unit);
  if (b < 0) throw std::logic_error("Reducer: the model used unit " + std::to_string(unit) + ", which it did not declare");
  return static_cast<std::size_t>(b);
}

void Reducer::start_gather(std::size_t b) {
  allocate_storage(flat_params_[b]);
  const std::uint64_t before = dp_.bytes_sent();
  gathers_[b] = dp_.all_gather(param_shards_[b].data_ptr(), flat_params_[b].data_ptr(),
                               static_cast<std::size_t>(shard_size(b)) * sizeof(float),
                               "parameter unit " + std::to_string(b));
  bytes_ += dp_.bytes_sent() - before;
  held_[b] = Held::InFlight;
  note_peaks();
}

void Reducer::materialize(std::size_t b) {
  if (held_[b] == Held::Freed) start_gather(b);
  if (held_[b] == Held::InFlight) gathers_[b].wait();
  held_[b] = Held::Gathered;
}

void Reducer::free_parameters(std::size_t b) {
  if (held_[b] == Held::InFlight) gathers_[b].wait();  // MPI may still be writing into it
  if (held_[b] != Held::Freed) free_storage(flat_params_[b]);
  held_[b] = Held::Freed;
}

void Reducer::prefetch(int unit) {
  const std::ptrdiff_t b = find_unit(unit);  // none past either end, or where this stage lacks it
  if (prefetch_ && b >= 0 && held_[static_cast<std::size_t>(b)] == Held::Freed) start_gather(static_cast<std::size_t>(b));
}

void Reducer::gather(int unit) {
  if (zero_stage_ != 3) return;
  const std::size_t b = bucket_of_unit(unit);
  const bool reused = held_[b] == Held::Gathered;  // kept from an earlier use (the tied head): no hint
  materialize(b);
  if (!reused) prefetch(unit + 1);  // forward runs the units in order
}

torch::Tensor Reducer::release(int unit, const torch::Tensor& out, bool keep) {
  if (zero_stage_ != 3) return out;
  if (out.requires_grad()) out.register_hook([this, unit](const torch::Tensor&) { before_backward(unit); });
  if (!keep) free_parameters(bucket_of_unit(unit));
  return out;
}

// Called when the gradient of the unit's output is complete, before autograd runs the unit's
// backward: the unit's parameters and its gradient bucket must exist by then.
void Reducer::before_backward(int unit) {
  const std::size_t b = bucket_of_unit(unit);
  materialize(b);
  if (!buckets_[b].defined()) allocate_gradient(b);
  prefetch(unit - 1);  // backward runs them in reverse
}

void Reducer::gather_all_parameters() {
  if (zero_stage_ != 3) return;
  for (std::size_t b = 0; b < flat_params_.size(); ++b)
    if (held_[b] == Held::Freed) start_gather(b);
  for (std::size_t b = 0; b < flat_params_.size(); ++b) materialize(b);
}

void Reducer::release_all_parameters(bool adopt) {
  if (zero_stage_ != 3) return;
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < flat_params_.size(); ++b) {
    if (adopt) param_shards_[b].copy_(flat_params_[b].narrow(0, dp_.rank() * shard_size(b), shard_size(b)));
    free_parameters(b);
  }
}

void Reducer::note_peaks() {
  gradient_peak_ = std::max(gradient_peak_, gradient_bytes());
  parameter_peak_ = std::max(parameter_peak_, parameter_bytes());
}

std::uint64_t Reducer::gradient_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : buckets_) n += t.defined() ? t.nbytes() : 0;
  for (const auto& t : received_) n += t.defined() ? t.nbytes() : 0;
  if (zero_stage_ >= 2)  // stage 1's shards are parts of the buckets
    for (const auto& t : shards_) n += t.nbytes();
  return n;
}

std::uint64_t Reducer::parameter_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : flat_params_) n += t.storage().nbytes();  // 0 while a stage-3 unit is freed
  for (const auto& t : param_shards_) n += t.nbytes();
  return n;
}

}  // namespace gridtrain
