#include "gridtrain/app/validation.hpp"

#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/batches.hpp"
#include "gridtrain/precision/autocast.hpp"

namespace gridtrain {

Validation::Validation(const Config& c, const Samples& samples, Grid& grid, Log& log)
    : samples_(samples), grid_(grid), precision_(c.precision.type) {
  const auto sets = samples.datasets();
  for (int d = 0; d < static_cast<int>(sets.size()); ++d) {
    const auto all = samples.validation(c.train.eval_samples, d);
    total_ += all.size();
    if (all.size() < static_cast<std::size_t>(c.train.eval_samples))
      log.print("Validation: train.eval_samples = " + std::to_string(c.train.eval_samples) + " exceeds the " +
                std::to_string(all.size()) + " " + samples.validation_samples() +
                (sets[d].name.empty() ? "" : " (" + sets[d].name + ")") + "; each pass uses all of them once\n");
    const auto [b, e] = share(all.size(), grid.dp().rank(), grid.dp().size());
    Subset s{{all.begin() + b, all.begin() + e}};
    double most = static_cast<double>(s.mine.size());  // the first total % dp ranks have one more
    grid.dp().blocking_max(&most, 1, "validation samples");
    s.most = static_cast<std::int64_t>(most);
    subsets_.push_back(std::move(s));
  }
}

Validation::Result Validation::run(Model& model, PipelineEngine& engine, int micro_batch, torch::Device device) const {
  struct EvalMode {  // batch norm normalises with its running statistics, and leaves them be
    Model& m;
    explicit EvalMode(Model& model) : m(model) { m.eval(); }
    ~EvalMode() { m.train(); }
  } eval_mode(model);
  const auto sets = samples_.datasets();
  Result r;
  for (std::size_t d = 0; d < subsets_.size(); ++d) {
    const auto total = sums(subsets_[d], model, engine, micro_batch, device);
    const double loss = total[0] / total[2];
    r.loss += sets[d].weight * loss;
    if (subsets_.size() > 1) r.per_dataset.push_back(loss);
    if (model.classifier()) r.accuracy = total[1] / total[2];
  }
  return r;
}

std::array<double, 3> Validation::sums(const Subset& subset, Model& model, PipelineEngine& engine, int micro_batch,
                                       torch::Device device) const {
  const int width = samples_.width();
  const auto rows = static_cast<std::int64_t>(subset.mine.size());
  auto batch = [&](std::int64_t first, int n) {
    return model.split(sample_rows(n, width, device, [&](int b, std::int64_t* out) {
      if (first >= rows) std::fill(out, out + width, 0);  // a padding forward's row: its sums are dropped
      else samples_.val_row(subset.mine[static_cast<std::size_t>(first + b)], out);
    }));
  };
  // The last stage's sums: head_sums' (the loss first, then for a classifier its correct
  // predictions), then the items counted (those that carry loss).
  auto forward = [&](const PipelineEngine::Pass& in, const torch::Tensor& input, const torch::Tensor& targets,
                     int chunk) -> PipelineEngine::Pass {
    AutocastGuard autocast(precision_, device);
    auto y = model.stage_forward(in.x, chunk, input);  // the carried sums serve training's loss only
    if (!targets.defined()) return {y, {}};
    const auto items = torch::full({1}, model.items(targets), torch::TensorOptions(torch::kDouble).device(device));
    return {torch::cat({model.head_sums(y, targets).to(torch::kDouble), items}), {}};
  };
  const auto sums = engine.evaluate(rows, subset.most, micro_batch, batch, forward);
  const bool counts = model.last_stage() && grid_.represents({AxisId::Tp}) && !sums.empty();
  std::array<double, 3> total = {counts ? sums.front() : 0.0, counts && sums.size() > 2 ? sums[1] : 0.0,
                                 counts ? sums.back() : 0.0};  // nats, correct predictions, items
  grid_.world().blocking_sum(total.data(), 3, "validation sums");
  return total;
}

}  // namespace gridtrain
