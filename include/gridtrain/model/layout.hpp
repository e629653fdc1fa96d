// Where this rank's part of a model sits in the process grid (torch-free: the launch plan and
// --dry-run use it).
#pragma once
#include <cstdint>

namespace gridtrain {

class Axis;

/// Where this rank's part of the model sits in the grid.
struct ModelLayout {
  Axis* tp = nullptr;  ///< null: no tensor parallelism (or, for planning alone, tp_size ranks)
  int stage = 0, stages = 1;
  std::int64_t first_layer = 0, layers = -1;  ///< this stage's layers; -1: all of them
  int tp_size = 1;  ///< tensor-parallel ranks when tp is null: a plan without a grid (predict)
  bool sequence_parallel = false;  ///< grid.sequence_parallel: the sequence split over tp between its layers
};

}  // namespace gridtrain
