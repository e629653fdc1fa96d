#include "gridtrain/parallel/parameter_groups.hpp"

#include <stdexcept>

namespace gridtrain {

ParameterGroups::ParameterGroups(const std::vector<torch::Tensor>& params, const std::vector<std::size_t>& group_of,
                                 std::vector<ParameterGroup> groups, const Axis& dp, double bucket_mb, bool overlap,
                                 Compression compression, const ZeroOptions& zero)
    : groups_(std::move(groups)) {
  if (group_of.size() != params.size())
    throw std::invalid_argument("ParameterGroups: " + std::to_string(group_of.size()) + " group indices for " +
                                std::to_string(params.size()) + " parameters");
  std::vector<std::vector<torch::Tensor>> members(groups_.size());
  std::vector<ZeroOptions> options(groups_.size(), ZeroOptions{zero.stage, {}, zero.prefetch});
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::size_t k = group_of[i];
    if (k >= groups_.size())
      throw std::invalid_argument("ParameterGroups: parameter " + std::to_string(i) + " names group " +
                                  std::to_string(k) + " of " + std::to_string(groups_.size()));
    place_.push_back({k, members[k].size()});
    members[k].push_back(params[i]);
    options[k].unit_of.push_back(i < zero.unit_of.size() ? zero.unit_of[i] : -1);
  }
  for (std::size_t k = 0; k < groups_.size(); ++k) {
    Axis& axis = *groups_[k].axis;
    if (members[k].empty()) throw std::invalid_argument("ParameterGroups: group '" + groups_[k].name + "' is empty");
    if (dp.size() % axis.size() != 0)
      throw std::invalid_argument("ParameterGroups: group '" + groups_[k].name + "' reduces over " + axis.name() +
                                  " of " + std::to_string(axis.size()) + " ranks, which does not divide dp = " +
                                  std::to_string(dp.size()));
    weight_.push_back(dp.size() / axis.size());
    data_parallel_.push_back(
        std::make_unique<DataParallel>(members[k], axis, bucket_mb, overlap, compression, options[k]));
  }
}

bool ParameterGroups::any_sharded() const {
  for (const auto& d : data_parallel_)
    if (d->zero_stage() > 0) return true;
  return false;
}

void ParameterGroups::zero_grad(bool local_gradients) {
  for (auto& d : data_parallel_) d->reducer().zero_grad(local_gradients);
}

void ParameterGroups::begin_backward(bool last) {
  for (auto& d : data_parallel_) d->reducer().begin_backward(last);
}

void ParameterGroups::finish() {
  for (std::size_t k = 0; k < data_parallel_.size(); ++k) {
    Reducer& r = data_parallel_[k]->reducer();
    r.finish();  // the mean over the group's axis (of a = dp / weight ranks), or nothing with one rank
    // ... times a / dp: every gradient is 1/dp of the sum over the replicas' micro-batches, as the
    // dense ones are, since a group's parameter sees tokens of all dp ranks (experts: by dispatch).
    if (weight_[k] != 1 && r.exchange() != GradExchange::Local) r.scale(1.0 / weight_[k]);
  }
}

void ParameterGroups::scale(double factor) {
  for (auto& d : data_parallel_) d->reducer().scale(factor);
}

void ParameterGroups::all_gather() {
  for (auto& d : data_parallel_) d->parameters().all_gather();
}

void ParameterGroups::release_all() {
  for (auto& d : data_parallel_) d->parameters().release_all();
}

void ParameterGroups::gather_all() {
  for (auto& d : data_parallel_) d->parameters().gather_all();
}

void ParameterGroups::gather(int unit) {
  for (auto& d : data_parallel_)
    if (d->parameters().holds(unit)) d->parameters().gather(unit);
}

torch::Tensor ParameterGroups::release(int unit, const torch::Tensor& out, bool keep) {
  torch::Tensor hooked = out;  // each group hooks the gradient of the same output
  for (auto& d : data_parallel_)
    if (d->parameters().holds(unit)) hooked = d->parameters().release(unit, hooked, keep);
  return hooked;
}

torch::Tensor ParameterGroups::reduced_gradient(std::size_t i) const {
  const Place& at = place_.at(i);
  return data_parallel_[at.group]->reducer().reduced_gradient(at.index);
}

std::vector<ShardPiece> ParameterGroups::shard_pieces() const {
  std::vector<std::vector<ShardPiece>> per_group;
  for (const auto& d : data_parallel_) per_group.push_back(d->zero_stage() > 0 ? d->shard_pieces() : std::vector<ShardPiece>{});
  std::vector<ShardPiece> out;
  for (const Place& at : place_) out.push_back(per_group[at.group].empty() ? ShardPiece{} : per_group[at.group][at.index]);
  return out;
}

torch::Tensor ParameterGroups::gradient_sq(const std::vector<std::size_t>& counted, torch::Device device) const {
  std::vector<std::vector<std::size_t>> mine(groups_.size());
  for (const auto i : counted) mine[place_.at(i).group].push_back(place_[i].index);
  torch::Tensor sq;
  for (std::size_t k = 0; k < groups_.size(); ++k) {
    auto g = data_parallel_[k]->gradient_sq(mine[k], device);
    if (weight_[k] != 1) g = g * weight_[k];
    sq = sq.defined() ? sq + g : g;
  }
  return sq;
}

std::uint64_t ParameterGroups::gradient_bytes() const {
  return sum([](const DataParallel& d) { return d.reducer().gradient_bytes(); });
}
std::uint64_t ParameterGroups::gradient_peak_bytes() const {
  return sum([](const DataParallel& d) { return d.reducer().gradient_peak_bytes(); });
}
std::uint64_t ParameterGroups::parameter_bytes() const {
  return sum([](const DataParallel& d) { return d.parameters().bytes(); });
}
std::uint64_t ParameterGroups::parameter_peak_bytes() const {
  return sum([](const DataParallel& d) { return d.parameters().peak_bytes(); });
}
std::size_t ParameterGroups::bucket_count() const {
  return sum([](const DataParallel& d) { return d.reducer().bucket_count(); });
}

}  // namespace gridtrain
