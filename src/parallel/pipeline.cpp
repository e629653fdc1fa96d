#include "gridtrain/parallel/pipeline.hpp"

#include <algorithm>
#include <numeric>
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

std::vector<int> stage_layers(const std::vector<int>& given, int n_layer, int stages) {
  if (stages > n_layer)
    throw std::invalid_argument(std::to_string(stages) + " pipeline stages for " + std::to_string(n_layer) +
                                " layers; valid: grid.pp <= model.n_layer");
  if (given.empty()) {
    std::vector<int> layers;
    for (int s = 0; s < stages; ++s) layers.push_back(n_layer / stages + (s < n_layer % stages ? 1 : 0));
    return layers;
  }
  if (static_cast<int>(given.size()) != stages || std::accumulate(given.begin(), given.end(), 0) != n_layer)
    throw std::invalid_argument("must give " + std::to_string(stages) + " counts adding up to " +
                                std::to_string(n_layer) + "; valid: auto, or one layer count >= 1 per stage "
                                "separated by commas, e.g. 3,3,2");
  return given;
}

}  // namespace gridtrain
