#include "gridtrain/data/blended_samples.hpp"

#include <algorithm>
#include <cstdio>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/hash.hpp"
#include "gridtrain/util/sha256.hpp"

namespace gridtrain {
namespace {

constexpr int kDatasetShift = 56;  // a validation id: dataset << 56 | the dataset's own id

std::string show_weight(double w) {
  char s[32];
  std::snprintf(s, sizeof s, "%.4g", w);
  return s;
}

}  // namespace

BlendedSamples::BlendedSamples(const Config& c, MPI_Comm comm)
    : spec_(parse_blend(c.data.blend)), base_(spec_.paths.size(), 0), loader_(spec_.weights), main_(spec_.weights) {
  for (std::size_t i = 0; i < spec_.paths.size(); ++i) {
    Config one = c;
    one.data.blend.clear();
    one.data.path = spec_.paths[i];
    one.train.seed = splitmix64(c.train.seed ^ (0x626c656e64ULL + i));  // "blend": each dataset its own order
    datasets_.push_back(load_token_samples(one, comm));
  }
  check_agreement(c);
}

DataShape BlendedSamples::shape() const {
  DataShape s = datasets_.front()->shape();
  for (const auto& d : datasets_) s.vocab_size = std::max(s.vocab_size, d->shape().vocab_size);
  return s;
}

void BlendedSamples::train_row(std::uint64_t g, std::int64_t* out) {
  loader_.seek(g - start_);
  const auto [d, k] = loader_.next();
  datasets_[static_cast<std::size_t>(d)]->train_row(base_[static_cast<std::size_t>(d)] + k, out);
}

std::uint64_t BlendedSamples::epoch(std::uint64_t g) const {
  const std::lock_guard lock(main_mutex_);
  main_.seek(g - start_);
  std::uint64_t e = 0;
  for (std::size_t d = 0; d < datasets_.size(); ++d) e = std::max(e, datasets_[d]->epoch(base_[d] + main_.counts()[d]));
  return e;
}

std::vector<std::uint64_t> BlendedSamples::validation(int count, int dataset) const {
  auto ids = datasets_.at(static_cast<std::size_t>(dataset))->validation(count, 0);
  for (auto& id : ids) id |= static_cast<std::uint64_t>(dataset) << kDatasetShift;
  return ids;
}

std::vector<DatasetInfo> BlendedSamples::datasets() const {
  std::vector<DatasetInfo> out;
  for (std::size_t i = 0; i < spec_.paths.size(); ++i) out.push_back({spec_.paths[i], spec_.weights[i]});
  return out;
}

void BlendedSamples::val_row(std::uint64_t id, std::int64_t* out) const {
  datasets_.at(id >> kDatasetShift)->val_row(id & ((std::uint64_t{1} << kDatasetShift) - 1), out);
}

std::string BlendedSamples::describe() const {
  std::string s = "blend of " + std::to_string(datasets_.size()) + " datasets in Megatron's greedy order";
  for (std::size_t i = 0; i < datasets_.size(); ++i)
    s += "\n  weight " + show_weight(spec_.weights[i]) + ": " + datasets_[i]->describe();
  return s;
}

CorpusId BlendedSamples::id() const {
  CorpusId id = datasets_.front()->id();
  std::string shas;
  id.train_size = id.val_size = 0;
  for (const auto& d : datasets_) {
    const CorpusId one = d->id();
    shas += one.sha256 + "\n";
    if (one.sha256.empty()) shas.clear();
    id.train_size += one.train_size, id.val_size += one.val_size;
  }
  id.sha256 = shas.empty() ? "" : sha256_hex(shas);
  id.blend = spec_.text();
  return id;
}

DataState BlendedSamples::state() const {
  return {{"blend_weights", spec_.weights},
          {"blend_start", {static_cast<double>(start_)}},
          {"blend_base", std::vector<double>(base_.begin(), base_.end())}};
}

void BlendedSamples::restore(const DataState& state, std::uint64_t g) {
  std::vector<double> weights, start, base;
  for (const auto& [name, v] : state) {
    if (name == "blend_weights") weights = v;
    if (name == "blend_start") start = v;
    if (name == "blend_base") base = v;
  }
  if (weights.size() != datasets_.size() || start.size() != 1 || base.size() != datasets_.size()) {
    start_ = g;  // a checkpoint of other data (data.allow_change): every dataset from its start
    return;
  }
  start_ = static_cast<std::uint64_t>(start[0]);
  for (std::size_t d = 0; d < base_.size(); ++d) base_[d] = static_cast<std::uint64_t>(base[d]);
  if (weights == spec_.weights) return;
  BlendCursor was(weights);
  was.seek(g - start_);
  for (std::size_t d = 0; d < base_.size(); ++d) base_[d] += was.counts()[d];
  start_ = g;
}

// A blend mixes windows of one tokenizer's ids, documents ended by one token.
void BlendedSamples::check_agreement(const Config& c) const {
  const CorpusId first = datasets_.front()->id();
  for (std::size_t i = 1; i < datasets_.size(); ++i) {
    const CorpusId one = datasets_[i]->id();
    const std::string at = "data.blend = '" + c.data.blend + "': '" + spec_.paths[i] + "' ";
    const bool recorded = one.tokenizer != "none" && first.tokenizer != "none";  // Megatron datasets record none
    if (recorded && (one.tokenizer != first.tokenizer || one.tokenizer_model != first.tokenizer_model))
      throw Error(at + "was tokenized with " + one.tokenizer + ", '" + spec_.paths[0] + "' with " + first.tokenizer +
                  (one.tokenizer == first.tokenizer ? " of another model" : "") + "; a blend needs one tokenizer");
    if (datasets_[i]->shape().eod_token != datasets_.front()->shape().eod_token)
      throw Error(at + "ends its documents with token " + std::to_string(datasets_[i]->shape().eod_token) + ", '" +
                  spec_.paths[0] + "' with " + std::to_string(datasets_.front()->shape().eod_token) +
                  " (-1: none recorded); set data.eod_token or prepare them alike");
  }
}

}  // namespace gridtrain
