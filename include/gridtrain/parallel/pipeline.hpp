// Pipeline parallelism over grid.pp(): which layers each stage holds, and in which order a stage
// runs the forward and backward passes of a step's micro-batches.
#pragma once
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

struct PipeOp {
  enum Kind { Forward, Backward } kind;
  int micro_batch;
  bool operator==(const PipeOp&) const = default;
};

/// The passes of `stage` (0-based) of `stages` for `micro_batches` micro-batches, in order.
///   1f1b   (PipeDream-Flush; Narayanan et al. 2021, "Efficient Large-Scale Language Model
///           Training on GPU Clusters Using Megatron-LM", §2.2.1): min(stages − stage − 1, m)
///           warm-up forwards, then one forward and one backward in turn, then the remaining
///           backwards; at most stages − stage activations in flight.
///   gpipe  (Huang et al. 2019): every forward, then every backward.
/// Both have the bubble (p − 1)/(m + p − 1) of the step.
std::vector<PipeOp> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int micro_batches);

/// Layers per stage: `given` (grid.stage_layers, one count >= 1 per stage) checked against
/// n_layer and stages, or for an empty `given` (auto) n_layer split as evenly as possible, the
/// first n_layer % stages stages taking one more. Throws std::invalid_argument naming the
/// problem (more stages than layers, a wrong sum or length).
std::vector<int> stage_layers(const std::vector<int>& given, int n_layer, int stages);

}  // namespace gridtrain
