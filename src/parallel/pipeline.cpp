#include "gridtrain/parallel/pipeline.hpp"

#include <algorithm>
#include <deque>
#include <numeric>
#include <stdexcept>

namespace gridtrain {

namespace {

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): the k-th
// forward and backward pass of a rank over its m·v (micro-batch, chunk) passes.
std::vector<PipeOp> interleaved(int stage, int p, int m, int v) {
  if (m % p != 0)
    throw std::invalid_argument("the interleaved schedule runs micro-batches in groups of grid.pp = " +
                                std::to_string(p) + ", but a step has " + std::to_string(m) +
                                "; valid: train.global_batch / (train.micro_batch * dp) a multiple of grid.pp");
  auto op = [&](PipeOp::Kind kind, int k) {
    const int chunk = (k % (p * v)) / p;
    return PipeOp{kind, (k / (p * v)) * p + k % p, kind == PipeOp::Forward ? chunk : v - 1 - chunk};
  };
  const int total = m * v, warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<PipeOp> ops;
  int f = 0, b = 0;
  while (f < warmup) ops.push_back(op(PipeOp::Forward, f++));
  while (f < total) {
    ops.push_back(op(PipeOp::Forward, f++));
    ops.push_back(op(PipeOp::Backward, b++));
  }
  while (b < total) ops.push_back(op(PipeOp::Backward, b++));
  return ops;
}

// Qi et al.'s ZB-H1 over 1F1B's passes (the rule of sail-sg's zb-h1 schedule in Megatron-LM's
// forward_backward_pipelining_without_interleaving): stage r defers its first r steady-state
// weight passes and its last, which then fill the cooldown and the step's end.
std::vector<PipeOp> zb_h1(int stage, int p, int m) {
  const int warmup = std::min(p - stage - 1, m), remaining = m - warmup;
  std::vector<PipeOp> ops;
  std::deque<int> deferred;  // split backwards' micro-batches, oldest first
  int f = 0, b = 0;
  auto backward = [&](bool split) {
    ops.push_back({PipeOp::Backward, b, 0, split});
    if (split) deferred.push_back(b);
    ++b;
  };
  auto weight = [&] {
    ops.push_back({PipeOp::Weight, deferred.front()});
    deferred.pop_front();
  };
  while (f < warmup) ops.push_back({PipeOp::Forward, f++});
  for (int i = 0; i < remaining; ++i) {
    ops.push_back({PipeOp::Forward, f++});
    backward(stage > 0 && (i < stage || i == remaining - 1));
  }
  for (int i = 0; i < warmup; ++i) {
    backward(stage > 0);
    if (remaining + i >= stage && !deferred.empty()) weight();
  }
  while (!deferred.empty()) weight();
  return ops;
}

}  // namespace

std::vector<PipeOp> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int micro_batches, int chunks) {
  if (kind == PipelineSchedule::Interleaved) return interleaved(stage, stages, micro_batches, chunks);
  if (kind == PipelineSchedule::ZbH1) return zb_h1(stage, stages, micro_batches);
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

int in_flight_micro_batches(PipelineSchedule kind, int stage, int stages, int micro_batches, int chunks) {
  switch (kind) {
    case PipelineSchedule::GPipe: return micro_batches;
    case PipelineSchedule::Interleaved: {
      const int passes = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages + 1, micro_batches * chunks);
      return (passes + chunks - 1) / chunks;
    }
    case PipelineSchedule::ZbH1: {  // a split backward's micro-batch is held until its W
      int held = 0, most = 0;
      for (const PipeOp& op : zb_h1(stage, stages, micro_batches)) {
        held += op.kind == PipeOp::Forward ? 1 : op.kind == PipeOp::Weight || !op.split ? -1 : 0;
        most = std::max(most, held);
      }
      return most;
    }
    case PipelineSchedule::OneFOneB: break;
  }
  return std::min(stages - stage, micro_batches);
}

double bubble_ratio(int stages, int micro_batches, int chunks) {
  return static_cast<double>(stages - 1) / (static_cast<double>(chunks) * micro_batches);
}

double zb_h1_bubble_ratio(int stages, int micro_batches, double weight_share) {
  return bubble_ratio(stages, micro_batches, 1) * std::max(0.0, 1.0 - 3.0 * weight_share);
}

std::vector<int> stage_layers(const std::vector<int>& given, int n_layer, int stages) {
  if (stages > n_layer)
    throw std::invalid_argument(std::to_string(stages) + " pipeline stages for " + std::to_string(n_layer) +
                                " layers; valid: at most model.n_layer stages (grid.pp, times grid.virtual_stages with "
                                "the interleaved schedule)");
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
