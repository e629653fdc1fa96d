#include "gridtrain/parallel/pipeline.hpp"

#include <algorithm>
#include <numeric>
#include <charconv>
#include <stdexcept>

namespace gridtrain {

std::vector<PipeOp> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int micro_batches) {
  std::vector<PipeOp> ops;
  const int m = micro_batches;
  if (kind == PipelineSchedule::GPipe) {
    for (int i = 0; i < m; ++i) ops.push_back({PipeOp::Forward, i});
    for (int i = 0; i < m; ++i) ops.push_back({PipeOp::Backward, i});
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, m);
  int f = 0, b = 0;
  while (f < warmup) ops.push_back({PipeOp::Forward, f++});
  while (f < m) {
    ops.push_back({PipeOp::Forward, f++});
    ops.push_back({PipeOp::Backward, b++});
  }
  while (b < m) ops.push_back({PipeOp::Backward, b++});
  return ops;
}

std::vector<int> stage_layers(const std::string& rule, int n_layer, int stages) {
  if (stages > n_layer)
    throw std::invalid_argument(std::to_string(stages) + " pipeline stages for " + std::to_string(n_layer) +
                                " layers; valid: grid.pp <= model.n_layer");
  std::vector<int> layers;
  if (rule == "auto") {
    for (int s = 0; s < stages; ++s) layers.push_back(n_layer / stages + (s < n_layer % stages ? 1 : 0));
    return layers;
  }
  const std::string valid = "; valid: auto, or one layer count >= 1 per stage separated by commas, e.g. 3,3,2";
  for (std::size_t begin = 0;;) {  // every item a whole decimal integer: "1abc", "1.9", "" are errors
    const std::size_t end = std::min(rule.find(',', begin), rule.size());
    const std::string item = rule.substr(begin, end - begin);
    int n = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (ec != std::errc() || ptr != item.data() + item.size() || item.empty())
      throw std::invalid_argument("'" + item + "' is not a layer count" + valid);
    if (n < 1) throw std::invalid_argument("every stage needs at least one layer, got " + item + valid);
    layers.push_back(n);
    if (end == rule.size()) break;
    begin = end + 1;
  }
  if (static_cast<int>(layers.size()) != stages || std::accumulate(layers.begin(), layers.end(), 0) != n_layer)
    throw std::invalid_argument("'" + rule + "' must give " + std::to_string(stages) + " counts adding up to " +
                                std::to_string(n_layer) + valid);
  return layers;
}

}  // namespace gridtrain
