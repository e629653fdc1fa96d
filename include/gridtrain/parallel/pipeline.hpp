// Pipeline parallelism over grid.pp(): which layers each stage holds, and in which order a stage
// runs the forward and backward passes of a step's micro-batches.
#pragma once
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

struct PipeOp {
  /// Weight: the deferred weight gradients (W) of the oldest split backward (zb-h1).
  enum Kind { Forward, Backward, Weight } kind;
  int micro_batch;
  int chunk = 0;  ///< the model chunk (interleaved: this rank's virtual stage chunk · stages + stage)
  bool split = false;  ///< a Backward that computes the input gradient (B) only, its W deferred
  bool operator==(const PipeOp&) const = default;
};

/// The passes of `stage` (0-based) of `stages` for `micro_batches` micro-batches, in order.
///   1f1b   (PipeDream-Flush; Narayanan et al. 2021, "Efficient Large-Scale Language Model
///           Training on GPU Clusters Using Megatron-LM", §2.2.1): min(stages − stage − 1, m)
///           warm-up forwards, then one forward and one backward in turn, then the remaining
///           backwards; at most stages − stage activations in flight.
///   gpipe  (Huang et al. 2019): every forward, then every backward.
///   interleaved (§2.2.2): each rank holds `chunks` model chunks, chunk c being virtual stage
///           c·stages + stage of stages·chunks; 1F1B over the m·chunks (micro-batch, chunk)
///           passes in groups of `stages` micro-batches per chunk (forward k: chunk
///           (k / p) mod v, micro-batch (k / (p·v))·p + k mod p; backward k: chunk v − 1 − that),
///           (p − stage − 1)·2 + (v − 1)·p warm-up forwards (Megatron-LM's schedule).
///           Needs micro_batches a multiple of stages (throws std::invalid_argument).
///   zb-h1  (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §3.1, as sail-sg's zb-h1 schedule):
///           1f1b's passes, with backward i of the steady state split (its W deferred) iff stage > 0
///           and (i < stage or it is the last), every cooldown backward split on stages > 0 and
///           followed by one deferred W once remaining + i >= stage (remaining: the steady state's
///           passes), then the deferred Ws left, oldest first. Unsplit backwards compute their
///           W at once.
/// 1f1b and gpipe have the bubble (p − 1)/(m + p − 1) of the step, interleaved
/// (p − 1)/(v·m + p − 1): bubble_ratio(); zb-h1 (p − 1)(F + B − 2W) in time, with F, B, W a
/// micro-batch's forward, input-gradient and weight-gradient passes.
std::vector<PipeOp> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int micro_batches, int chunks = 1);

/// The most micro-batches whose activations `stage` holds at once, in units of all its layers:
/// gpipe m; 1f1b min(p − stage, m); interleaved its warm-up forwards plus one, of chunks
/// (each 1/v of its layers), rounded up to whole micro-batches; zb-h1 those forwarded and not
/// yet through their last backward pass (a split one's W), an upper bound: a deferred W keeps
/// only its linears' inputs and output gradients.
int in_flight_micro_batches(PipelineSchedule kind, int stage, int stages, int micro_batches, int chunks = 1);

/// The pipeline bubble's time over the ideal step's, (p − 1)/(v·m) (v = 1 but for interleaved;
/// Narayanan et al. 2021, §2.2).
double bubble_ratio(int stages, int micro_batches, int chunks);
/// zb-h1's bubble over the ideal step, (p − 1)(F + B − 2W) / (m(F + B + W)) = (p − 1)/m ·
/// max(0, 1 − 3w) (Qi et al. 2024, §3.1), with w = W/(F + B + W) the weight gradients' share of a
/// micro-batch's work.
double zb_h1_bubble_ratio(int stages, int micro_batches, double weight_share);

/// Layers per stage: `given` (grid.stage_layers, one count >= 1 per stage) checked against
/// n_layer and stages, or for an empty `given` (auto) n_layer split as evenly as possible, the
/// first n_layer % stages stages taking one more. Throws std::invalid_argument naming the
/// problem (more stages than layers, a wrong sum or length).
std::vector<int> stage_layers(const std::vector<int>& given, int n_layer, int stages);

}  // namespace gridtrain
