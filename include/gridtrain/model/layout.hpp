// Where this rank's part of a model sits in the process grid (torch-free: the launch plan and
// --dry-run use it).
#pragma once
#include <cstdint>
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

class Axis;

/// Consecutive transformer layers [first, first + count); count -1: to the last.
struct LayerRange {
  std::int64_t first = 0, count = -1;
};

/// Where this rank's part of the model sits in the grid.
struct ModelLayout {
  Axis* tp = nullptr;  ///< null: no tensor parallelism (or, for planning alone, tp_size ranks)
  int stage = 0, stages = 1;  ///< this rank's pipeline stage, of stages
  /// This stage's layers, one range per model chunk it holds, in chunk order (with the
  /// interleaved schedule chunk c is virtual stage c·stages + stage; else one chunk).
  std::vector<LayerRange> chunks = {{}};
  int tp_size = 1;  ///< tensor-parallel ranks when tp is null: a plan without a grid (predict)
  bool sequence_parallel = false;  ///< grid.sequence_parallel: the sequence split over tp between its layers
  Axis* ep = nullptr;  ///< the MoE layers' expert-parallel axis; null: every expert here (or ep_size ranks, planning)
  int ep_size = 1;     ///< expert-parallel ranks when ep is null (predict); rank 0's experts are planned
  Axis* cp = nullptr;  ///< the context-parallel axis each sequence is split over; null: whole (or cp_size, planning)
  int cp_size = 1;     ///< context-parallel ranks when cp is null (predict)
  ContextExchange cp_comm = ContextExchange::Ring;  ///< how attention reaches the other cp ranks' keys and values
};

}  // namespace gridtrain
