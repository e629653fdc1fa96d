#include "gridtrain/app/validation.hpp"

#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/batches.hpp"
#include "gridtrain/precision/autocast.hpp"

namespace gridtrain {

Validation::Validation(const Config& c, const Samples& samples, Grid& grid, Log& log)
    : samples_(samples), grid_(grid), precision_(c.precision.type) {
  const auto all = samples.validation(c.train.eval_samples);
  total_ = all.size();
  if (total_ < static_cast<std::size_t>(c.train.eval_samples))
    log.print("Validation: train.eval_samples = " + std::to_string(c.train.eval_samples) + " exceeds the " +
              std::to_string(total_) + " " + samples.validation_samples() + "; each pass uses all of them once\n");
  const auto [b, e] = share(all.size(), grid.dp().rank(), grid.dp().size());
  mine_.assign(all.begin() + b, all.begin() + e);
  double most = static_cast<double>(mine_.size());  // the first total % dp ranks have one more
  grid.dp().blocking_max(&most, 1, "validation samples");
  most_ = static_cast<std::int64_t>(most);
}

Validation::Result Validation::run(Model& model, PipelineEngine& engine, int micro_batch, torch::Device device) const {
  struct EvalMode {  // batch norm normalises with its running statistics, and leaves them be
    Model& m;
    explicit EvalMode(Model& model) : m(model) { m.eval(); }
    ~EvalMode() { m.train(); }
  } eval_mode(model);
  const int width = samples_.width();
  const auto rows = static_cast<std::int64_t>(mine_.size());
  auto batch = [&](std::int64_t first, int n) {
    return model.split(sample_rows(n, width, device, [&](int b, std::int64_t* out) {
      if (first >= rows) std::fill(out, out + width, 0);  // a padding forward's row: its sums are dropped
      else samples_.val_row(mine_[static_cast<std::size_t>(first + b)], out);
    }));
  };
  // The last stage's sums: head_sums' (the loss first, then for a classifier its correct
  // predictions), then the items counted (those that carry loss).
  auto forward = [&](const torch::Tensor& x, const torch::Tensor& input, const torch::Tensor& targets, int chunk) {
    AutocastGuard autocast(precision_, device);
    auto y = model.stage_forward(x, chunk, input);
    if (!targets.defined()) return y;
    const auto items = torch::full({1}, model.items(targets), torch::TensorOptions(torch::kDouble).device(device));
    return torch::cat({model.head_sums(y, targets).to(torch::kDouble), items});
  };
  const auto sums = engine.evaluate(rows, most_, micro_batch, batch, forward);
  const bool counts = model.last_stage() && grid_.represents({AxisId::Tp}) && !sums.empty();
  // nats, correct predictions, items
  double total[3] = {counts ? sums.front() : 0.0, counts && sums.size() > 2 ? sums[1] : 0.0, counts ? sums.back() : 0.0};
  grid_.world().blocking_sum(total, 3, "validation sums");
  Result r{total[0] / total[2], std::nullopt};
  if (model.classifier()) r.accuracy = total[1] / total[2];
  return r;
}

}  // namespace gridtrain
