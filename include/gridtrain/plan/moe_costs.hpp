// What a mixture-of-experts deck costs beyond the dense accounting (G22 §4): parameters in all
// and per token, this rank's experts and their state, and the token dispatch's all-to-all
// traffic. Torch-free: --dry-run and predict use it.
#pragma once
#include <array>
#include <string>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/layout.hpp"

namespace gridtrain {

struct MoeCosts {
  double total_params = 0;   ///< the whole model's, every expert counted
  double active_params = 0;  ///< what one token runs through: k of the E experts in each MoE layer
  double expert_params = 0;  ///< this rank's experts': E / ep in each MoE layer of its stage, 1/tp of each
  double stage_layers = 0;   ///< MoE layers on this rank's pipeline stage (all its chunks)
  /// Their parameters, gradients and optimizer state per rank, bytes, sharded by ZeRO over the
  /// expert-data-parallel dp / ep ranks (zero_state_bytes).
  std::array<double, 3> expert_state{};
  /// Bytes a rank sends per step on ep under uniform routing: per MoE layer of its stage and
  /// micro-batch four exchanges (dispatch and combine; their gradients in backward) of the B·T·k
  /// routed rows of C elements, of which (ep − 1)/ep leave the rank:
  /// 4 · L_moe · M · B·T·k · C · elem · (ep − 1)/ep.
  double all_to_all_bytes = 0;
};

/// c's costs on grid g for the rank whose part of the model is `layout` (its stage's layers;
/// its tp and ep axes are not read: E / g.ep experts per rank, each split over g.tp).
/// whole_params: the one-rank model's parameter count (plan_model with the default layout);
/// accumulation micro-batches per step, elem bytes per activation element.
MoeCosts moe_costs(const Config& c, const GridShape& g, const ModelLayout& layout, double whole_params,
                   int accumulation, int elem);

/// The dry-run's lines for m (the rank's with the most experts): "MoE: ...".
std::string describe(const MoeCosts& m, const Config& c, const GridShape& g);

}  // namespace gridtrain
