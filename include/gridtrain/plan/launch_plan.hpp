// The launch plan: what follows from the deck and the world before anything is built — the grid
// shape, the layers of each pipeline stage, gradient accumulation, the device and the backend.
// Computed once, shared by the Trainer and --dry-run. Like parse_config() for the deck,
// plan_launch() collects every problem of the deck on this world and reports them together.
#pragma once
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"

namespace gridtrain {

struct ModelLayout;

struct LaunchPlan {
  GridShape shape;                ///< dp × cp × tp × pp = the world size
  std::vector<int> stage_layers;  ///< transformer layers of each (virtual) pipeline stage (grid.stage_layers)
  int virtual_stages = 1;         ///< model chunks per pipeline rank (grid.virtual_stages, interleaved)
  int accumulation = 1;           ///< micro-batches per step and dp rank: global = micro · dp · accumulation
  bool sequence_parallel = false; ///< grid.sequence_parallel (in effect with tp > 1)
  ContextExchange cp_comm = ContextExchange::Ring;  ///< grid.cp_comm (in effect with cp > 1)
  bool cuda = false;              ///< train.device resolved (auto: a CUDA build that sees a GPU)
  bool nccl = false;              ///< comm.backend resolved (auto: nccl exactly when on CUDA)
  /// Settings that run but do not do what they are for (selective recomputation with sdpa
  /// attention), each naming the keys and what to use instead: for the setup report.
  std::vector<std::string> warnings = {};
};

/// The plan of c on a world of world_size ranks. Throws gridtrain::Error listing every problem
/// found (the world does not fit the grid, n_head not divisible by tp, more stages than layers,
/// a bad grid.stage_layers, a block_size sequence or context parallelism cannot split, features
/// context parallelism does not support, global_batch not a multiple of micro_batch · dp, options that need
/// tp = pp = 1, fault injection that could never fire, and with resolve_device a device or
/// backend this build or machine lacks), each naming the keys and what would be valid.
/// --dry-run plans without resolve_device: it may run on a login node without the job's GPUs.
LaunchPlan plan_launch(const Config& c, int world_size, bool resolve_device = true);

/// What keeps c's model, batch and options from running on a grid of this shape (the checks of
/// plan_launch that do not involve the world, the device or fault injection); empty: it can.
/// For `gridtrain predict`, which weighs layouts without running them.
std::vector<std::string> layout_problems(const Config& c, const GridShape& shape);

/// Stage `stage` of a pipeline with these layers per virtual stage (stages · chunks of them):
/// its chunks' layers (chunk c: virtual stage c·stages + stage), on tp (or, planning without a
/// grid, tp_size ranks), the sequence split over them or not.
ModelLayout stage_layout(const std::vector<int>& stage_layers, int stage, int chunks, Axis* tp, int tp_size,
                         bool sequence_parallel = false);

/// This rank's part of the model on grid: its tp axis, its stage and that stage's layers.
ModelLayout model_layout(const LaunchPlan& plan, Grid& grid);

/// Puts this rank on its device: with plan.cuda, picks its GPU (node-local rank) and, with
/// plan.nccl, switches the grid's axes to NCCL. Returns the CUDA device index, or -1 for the CPU.
/// Collective over the grid. Throws gridtrain::Error when the GPU or NCCL cannot be set up.
int place_rank(const LaunchPlan& plan, const Config& c, Grid& grid);

}  // namespace gridtrain
