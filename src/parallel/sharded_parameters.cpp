#include "gridtrain/parallel/sharded_parameters.hpp"

#include <algorithm>
#include <string>

namespace gridtrain {
namespace {

// Stage 3. A freed flat parameter keeps its shape but its storage holds no bytes; gathering
// allocates the storage again in place, so every view of it (the model's parameters, the tensors
// autograd saved for backward) sees the gathered values.
void free_storage(const torch::Tensor& t) { t.storage().unsafeGetStorageImpl()->reset(); }

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();  // flat, at offset 0
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

ShardedParameters::ShardedParameters(std::vector<torch::Tensor> params, std::shared_ptr<const BucketLayout> layout,
                                     Axis& dp, int stage, bool prefetch)
    : params_(std::move(params)), layout_(std::move(layout)), dp_(dp), stage_(stage), prefetch_(prefetch) {
  if (stage_ > 0) flatten();
  note_peak();
}

void ShardedParameters::flatten() {
  torch::NoGradGuard no_grad;
  const BucketLayout& l = *layout_;
  for (std::size_t b = 0; b < l.buckets(); ++b)
    flat_.push_back(torch::zeros({l.bucket_numel(b)}, params_[l.members(b).front()].options()));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    auto view = flat_[l.bucket_of(i)].narrow(0, l.offset(i), p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
  }
  if (stage_ == 3) {  // keep the shards; the units are gathered when the model uses them
    for (std::size_t b = 0; b < l.buckets(); ++b)
      shards_.push_back(flat_[b].narrow(0, dp_.rank() * l.shard_size(b), l.shard_size(b)).clone());
    held_.assign(l.buckets(), Held::Gathered);
    gathers_.resize(l.buckets());
    release_all();
  }
}

torch::Tensor ShardedParameters::own(std::size_t b) const {
  const std::int64_t s = layout_->shard_size(b);
  return stage_ == 3 ? shards_[b] : flat_[b].narrow(0, dp_.rank() * s, s);
}

void ShardedParameters::all_gather() {
  if (stage_ == 0 || stage_ == 3) return;
  std::vector<Work> gathers;
  for (std::size_t b = 0; b < flat_.size(); ++b) {
    const auto bytes = static_cast<std::size_t>(layout_->shard_size(b)) * flat_[b].element_size();
    auto* flat = static_cast<char*>(flat_[b].data_ptr());
    gathers.push_back(dp_.all_gather(flat + dp_.rank() * bytes, flat, bytes, "parameter bucket " + std::to_string(b)));
  }
  for (auto& w : gathers) w.wait();
}

void ShardedParameters::start_gather(std::size_t b) {
  allocate_storage(flat_[b]);
  gathers_[b] = dp_.all_gather(shards_[b].data_ptr(), flat_[b].data_ptr(),
                               static_cast<std::size_t>(layout_->shard_size(b)) * flat_[b].element_size(),
                               "parameter unit " + std::to_string(b));
  held_[b] = Held::InFlight;
  note_peak();
}

void ShardedParameters::materialize(std::size_t b) {
  if (held_[b] == Held::Freed) start_gather(b);
  if (held_[b] == Held::InFlight) gathers_[b].wait();
  held_[b] = Held::Gathered;
}

void ShardedParameters::free_unit(std::size_t b) {
  if (held_[b] == Held::InFlight) gathers_[b].wait();  // MPI may still be writing into it
  if (held_[b] != Held::Freed) free_storage(flat_[b]);
  held_[b] = Held::Freed;
}

void ShardedParameters::prefetch(int unit) {
  const std::ptrdiff_t b = layout_->find_unit(unit);  // none past either end, or where this stage lacks it
  if (prefetch_ && b >= 0 && held_[static_cast<std::size_t>(b)] == Held::Freed) start_gather(static_cast<std::size_t>(b));
}

void ShardedParameters::gather(int unit) {
  if (stage_ != 3) return;
  const std::size_t b = layout_->bucket_of_unit(unit);
  const bool reused = held_[b] == Held::Gathered;  // kept from an earlier use (the tied head): no hint
  materialize(b);
  if (!reused) prefetch(unit + 1);  // forward runs the units in order
}

torch::Tensor ShardedParameters::release(int unit, const torch::Tensor& out, bool keep) {
  if (stage_ != 3) return out;
  if (out.requires_grad()) out.register_hook([this, unit](const torch::Tensor&) { before_backward(unit); });
  if (!keep) free_unit(layout_->bucket_of_unit(unit));
  return out;
}

// Called when the gradient of the unit's output is complete, before autograd runs the unit's
// backward: the unit's parameters and its gradient bucket must exist by then.
void ShardedParameters::before_backward(int unit) {
  const std::size_t b = layout_->bucket_of_unit(unit);
  materialize(b);
  if (gradients_) gradients_->ensure_gradient(b);
  prefetch(unit - 1);  // backward runs them in reverse
}

void ShardedParameters::gradients_complete(std::size_t bucket) {
  if (stage_ == 3) free_unit(bucket);  // the unit's backward is done
}

void ShardedParameters::gather_all() {
  if (stage_ != 3) return;
  for (std::size_t b = 0; b < flat_.size(); ++b)
    if (held_[b] == Held::Freed) start_gather(b);
  for (std::size_t b = 0; b < flat_.size(); ++b) materialize(b);
}

void ShardedParameters::release_all() {
  if (stage_ != 3) return;
  for (std::size_t b = 0; b < flat_.size(); ++b) free_unit(b);
}

std::uint64_t ShardedParameters::bytes() const {
  std::uint64_t n = 0;
  if (stage_ == 0)  // the model's own tensors hold the parameters
    for (const auto& p : params_) n += p.nbytes();
  for (const auto& t : flat_) n += t.storage().nbytes();  // 0 while a stage-3 unit is freed
  for (const auto& t : shards_) n += t.nbytes();
  return n;
}

void ShardedParameters::note_peak() { peak_ = std::max(peak_, bytes()); }

}  // namespace gridtrain
