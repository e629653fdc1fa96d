#include "gridtrain/sparse/sparse_training.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "gridtrain/sparse/top_k.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {
namespace {

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// Training FLOPs per item of a product of dense cost `flops` at density d, when a share
// `dense_gradient` of the steps computes its dense weight gradient (RigL's regrowing updates:
// 2 f_S + f_D for such a step instead of 3 f_S).
double sparse_flops(double flops, double d, double dense_gradient) {
  return flops * d + dense_gradient * flops * (1.0 - d) / 3.0;
}

}  // namespace

SparseTraining::SparseTraining(const Config& cfg, const Model& model, const std::vector<NamedParameter>& pieces,
                               Optimizer& opt, Grid& grid, bool pieces_split_over_dp)
    : cfg_(cfg), grid_(grid), split_over_dp_(pieces_split_over_dp), schedule_(cfg.sparsity, cfg.train.steps),
      dense_flops_(model.plan().flops_per_item()) {
  const auto& wanted = cfg.sparsity.tensors;
  // Every stage's parameters once each, "name class flops dims...", gathered over the world.
  std::string mine;
  for (const auto& p : pieces) {
    mine += p.name + ' ' + std::to_string(static_cast<int>(model.tensor_class(p.name))) + ' ' +
            fmt("%.17g", model.weight_flops_per_item(p.name));
    for (const auto d : model.shard(p.name).global_shape) mine += ' ' + std::to_string(d);
    mine += '\n';
  }
  std::map<std::string, std::pair<Global, std::vector<std::int64_t>>> all;
  for (const auto& text : grid.world().blocking_gather_text(mine, "sparsity tensors")) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      Global g;
      int cls = 0;
      std::vector<std::int64_t> shape;
      f >> g.name >> cls >> g.flops;
      for (std::int64_t d; f >> d;) shape.push_back(d);
      g.cls = static_cast<TensorClass>(cls);
      g.numel = product(shape);
      g.sparsified = std::find(wanted.begin(), wanted.end(), g.cls) != wanted.end();
      all.try_emplace(g.name, g, shape);
    }
  }
  std::vector<std::vector<std::int64_t>> shapes;
  std::set<std::string> classes;  // what the model has, for the message below
  for (auto& [name, entry] : all) {
    global_.push_back(entry.first);
    classes.insert(name_of(entry.first.cls));
    if (entry.first.sparsified) shapes.push_back(entry.second);
  }
  if (shapes.empty()) {
    std::string valid;
    for (const auto& c : classes) valid += (valid.empty() ? "" : ", ") + c;
    throw Error(std::string("sparsity.tensors = ") + show_key(cfg, "sparsity.tensors") + ": model.type = " +
                name_of(cfg.model.type) + " has no parameter of these classes; valid: classes it has: " + valid);
  }
  const auto densities = final_densities(cfg.sparsity.distribution, cfg.sparsity.target, shapes);
  for (std::size_t g = 0, d = 0; g < global_.size(); ++g)
    if (global_[g].sparsified) global_[g].density = densities[d++], layer_dense_flops_ += global_[g].flops;

  const auto state = opt.state();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto it = std::find_if(global_.begin(), global_.end(), [&](const Global& g) { return g.name == pieces[i].name; });
    if (!it->sparsified) continue;
    Local t{i, static_cast<std::size_t>(it - global_.begin()), model.shard(pieces[i].name), pieces[i]};
    t.counted = t.spec.counted_on(grid.tp().rank());
    for (const auto& st : state)
      if (st.name.substr(0, st.name.find('/')) == t.weight.name) t.state.push_back(st.param);
    t.mask = global_index(t).ge(0).to(torch::kFloat).view_as(t.weight.param);  // padding rows: masked
    masks_.push_back({t.weight.name + "/mask", t.mask, t.weight.shape, t.weight.offset});
    local_.push_back(std::move(t));
  }
}

// The global flat index of each element of t's piece, -1 for padding rows of a shard: the
// piece's elements of the local tensor, whose rows map onto the global tensor as ShardSpec
// says (per part, rank r holds rows [r·rows, r·rows + valid)).
torch::Tensor SparseTraining::global_index(const Local& t) const {
  const ShardSpec& spec = t.spec;
  const Axis& along = grid_.axis(spec.axis);
  const int rank = along.rank(), size = along.size();
  auto g = torch::arange(product(spec.global_shape), torch::kLong).view(spec.global_shape);
  if (spec.dim >= 0 && size > 1) {
    const int d = spec.dim;
    std::vector<std::int64_t> split = spec.global_shape;  // dimension d as (parts, rows per part)
    split[d] /= spec.parts;
    split.insert(split.begin() + d, spec.parts);
    const std::int64_t rows = shard_rows(spec, size), valid = valid_rows(spec, rank, size);
    g = g.view(split).narrow(d + 1, std::min(split[d + 1], rank * rows), valid);
    if (valid < rows) {
      auto pad = g.sizes().vec();
      pad[d + 1] = rows - valid;
      g = torch::cat({g, torch::full(pad, -1, torch::kLong)}, d + 1);
    }
  }
  g = g.reshape(-1);
  if (!t.weight.shape.empty()) g = g.narrow(0, t.weight.offset, t.weight.param.numel());
  return g.to(t.weight.param.device());
}

void SparseTraining::mask_gradients(long long s, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const bool scores =
      cfg_.sparsity.method == SparsityMethod::Rigl && schedule_.updates_at(s) && !schedule_.first_update(s);
  for (auto& t : local_) {
    const torch::Tensor& g = grads.at(t.piece);
    if (!g.defined()) continue;
    if (scores) t.score = magnitude_key(g);  // the dense gradient, before masking
    g.mul_(t.mask.view_as(g));
  }
}

void SparseTraining::after_update(long long s) {
  torch::NoGradGuard no_grad;
  if (schedule_.updates_at(s)) update_masks(s);
  for (auto& t : local_) t.weight.param.mul_(t.mask);
  const double layer = layer_flops(s);
  flops_sum_ += dense_flops_ - layer_dense_flops_ + layer;
  layer_flops_sum_ += layer;
  ++flops_steps_;
  last_step_ = s;
}

void SparseTraining::update_masks(long long s) {
  const bool regrow = cfg_.sparsity.method != SparsityMethod::Gmp && !schedule_.first_update(s);
  const std::size_t n = local_.size();
  std::vector<torch::Tensor> index(n);
  std::vector<std::int64_t> regrown(n, 0);
  std::vector<TopKPart> keep_parts, grow_parts;
  for (std::size_t j = 0; j < n; ++j) {
    const Local& t = local_[j];
    const Global& g = global_[t.global];
    index[j] = global_index(t);
    const auto active = t.mask.reshape(-1).gt(0);
    const std::int64_t k = std::llround(schedule_.density(g.density, s) * static_cast<double>(g.numel));
    if (regrow) regrown[j] = std::llround(schedule_.drop_fraction(s) * static_cast<double>(k));
    keep_parts.push_back({torch::where(active, magnitude_key(t.weight.param), -1), index[j], g.numel, k - regrown[j],
                          t.counted});
  }
  auto sum = [this](std::vector<double>& c) {
    grid_.tp().blocking_sum(c.data(), static_cast<int>(c.size()), "sparsity counts");
    if (split_over_dp_) grid_.dp_cp().blocking_sum(c.data(), static_cast<int>(c.size()), "sparsity counts");
  };
  const auto keep = select_top_k(keep_parts, sum);
  std::vector<torch::Tensor> grow(n);
  if (regrow) {
    for (std::size_t j = 0; j < n; ++j) {
      const Local& t = local_[j];
      const auto score = cfg_.sparsity.method == SparsityMethod::Rigl
                             ? t.score
                             : random_key(cfg_.train.seed, s, t.weight.name, index[j]);
      const auto free = keep[j].logical_not().logical_and(index[j].ge(0));
      grow_parts.push_back({torch::where(free, score, -1), index[j], global_[t.global].numel, regrown[j], t.counted});
    }
    grow = select_top_k(grow_parts, sum);
  }
  for (std::size_t j = 0; j < n; ++j) {
    Local& t = local_[j];
    const auto active = regrow ? keep[j].logical_or(grow[j]).view_as(t.mask) : keep[j].view_as(t.mask);
    // Weights and moments survive where the connection is active before and after: dropped ones
    // and new ones (inactive before) start from zero, while one dropped and regrown at the same
    // update keeps its value (RigL's reference: new connections are those absent from the mask
    // before the update). At density 1 nothing changes, as at sparsity.target = 0 it must not.
    const auto survives = active.logical_and(t.mask.gt(0)).to(torch::kFloat);
    t.weight.param.mul_(survives);
    for (auto& st : t.state) st.mul_(survives);
    t.mask.copy_(active);
    t.score.reset();
  }
}

bool SparseTraining::regrowing(long long s) const {
  return cfg_.sparsity.method == SparsityMethod::Rigl && s > schedule_.start() && s < schedule_.end();
}

// Step s runs with the masks of step s - 1's update (the initial ones before the first update).
double SparseTraining::layer_flops(long long s) const {
  const double dense_gradient = regrowing(s) && schedule_.updates_at(s) ? 1.0 : 0.0;
  double f = 0;
  for (const auto& g : global_)
    if (g.sparsified) f += sparse_flops(g.flops, schedule_.density(g.density, s - 1), dense_gradient);
  return f;
}

SparsityReport SparseTraining::report() {
  std::vector<double> ones(global_.size(), 0.0);
  for (const auto& t : local_)
    if (t.counted && (split_over_dp_ || grid_.represents({AxisId::Dp, AxisId::Cp}))) ones[t.global] += t.mask.sum().item<double>();
  grid_.world().blocking_sum(ones.data(), static_cast<int>(ones.size()), "sparsity report");
  SparsityReport r;
  std::map<int, std::pair<double, double>> by_class;  // class → {zeros, elements}
  double zeros = 0, sparsified = 0, all = 0, layer = 0;
  // The next step's cost at the masks counted here, RigL's dense gradients spread over the interval.
  const double dense_gradient = regrowing(last_step_ + 1) ? 1.0 / schedule_.interval() : 0.0;
  for (std::size_t g = 0; g < global_.size(); ++g) {
    const Global& t = global_[g];
    const double n = static_cast<double>(t.numel), z = t.sparsified ? n - ones[g] : 0.0;
    auto& c = by_class[static_cast<int>(t.cls)];
    c.first += z, c.second += n;
    zeros += z, all += n;
    if (!t.sparsified) continue;
    sparsified += n;
    layer += sparse_flops(t.flops, ones[g] / n, dense_gradient);
  }
  r.sparsified = zeros / sparsified;
  r.model = zeros / all;
  for (const auto& [cls, c] : by_class) r.by_class.emplace_back(name_of(static_cast<TensorClass>(cls)), c.first / c.second);
  r.layer_dense_flops_per_item = layer_dense_flops_;
  r.layer_flops_per_item = layer;
  r.dense_flops_per_item = dense_flops_;
  r.flops_per_item = dense_flops_ - layer_dense_flops_ + layer;
  const double steps = static_cast<double>(flops_steps_);
  r.mean_flops_per_item = flops_steps_ > 0 ? flops_sum_ / steps : r.flops_per_item;
  r.mean_layer_flops_per_item = flops_steps_ > 0 ? layer_flops_sum_ / steps : r.layer_flops_per_item;
  return r;
}

std::string SparseTraining::describe() const {
  const Config::Sparsity& s = cfg_.sparsity;
  std::int64_t tensors = 0, sparsified = 0, all = 0;
  for (const auto& g : global_) {
    all += g.numel;
    if (g.sparsified) ++tensors, sparsified += g.numel;
  }
  return std::string("Sparsity: ") + name_of(s.method) + " to " + fmt("%.1f", 100.0 * s.target) + " % zeros (" +
         name_of(s.distribution) + ") in " + std::to_string(tensors) + " tensors (" + show_key(cfg_, "sparsity.tensors") +
         "), " + fmt("%.3g", static_cast<double>(sparsified)) + " of " + fmt("%.3g", static_cast<double>(all)) +
         " parameters; masks change every " + std::to_string(schedule_.interval()) + " steps from step " +
         std::to_string(schedule_.start()) + " to " + std::to_string(schedule_.end()) + "\n";
}

std::string SparseTraining::never_prunes() const {
  const Config::Sparsity& s = cfg_.sparsity;
  if (s.target == 0.0)
    return "sparsity.target = 0: no weight is ever pruned, so sparsity." + std::string(name_of(s.method)) +
           " trains the dense model (valid targets that prune: 0 < sparsity.target < 1)";
  if (schedule_.start() > cfg_.train.steps)
    return "sparsity.start = " + std::to_string(schedule_.start()) + " is past train.steps = " +
           std::to_string(cfg_.train.steps) + ": the masks never change in this run, and it trains the dense model";
  return "";
}

}  // namespace gridtrain
