#include "gridtrain/plan/moe_costs.hpp"

#include <cstdio>

#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"

namespace gridtrain {

MoeCosts moe_costs(const Config& c, const GridShape& g, const ModelLayout& layout, double whole_params,
                   int accumulation, int elem) {
  double layers = 0, here = 0;  // MoE layers in the model, on this rank's stage
  for (int i = 0; i < c.model.n_layer; ++i) layers += c.moe.on(i) ? 1 : 0;
  for (const LayerRange& r : layout.chunks) {
    const std::int64_t end = r.count < 0 ? c.model.n_layer : r.first + r.count;
    for (auto i = r.first; i < end; ++i) here += c.moe.on(static_cast<int>(i)) ? 1 : 0;
  }
  const double E = c.moe.experts, k = c.moe.top_k, C = c.model.n_embd;
  const double per_expert = 3.0 * C * static_cast<double>(expert_width(c));  // SwiGLU: gate, up, down
  MoeCosts m;
  m.total_params = whole_params;
  m.active_params = whole_params - layers * (E - k) * per_expert;
  m.expert_params = here * (E / g.ep) * per_expert / g.tp;  // expert tensor parallelism splits each
  m.stage_layers = here;
  const int replicas = g.dp / g.ep * g.cp;  // expert dp × cp
  const int zero = replicas > 1 ? c.optim.zero_stage : 0;  // as the Reducer: one rank has nothing to shard
  m.expert_state = zero_state_bytes(zero, m.expert_params, c.optim.type, c.precision.weights, replicas);
  const double rows = static_cast<double>(c.train.micro_batch) * c.model.block_size / g.cp * k;  // this rank's tokens
  m.all_to_all_bytes = 4.0 * here * accumulation * rows * C * elem * (g.ep - 1) / g.ep;
  return m;
}

std::string describe(const MoeCosts& m, const Config& c, const GridShape& g) {
  const double mib = 1024.0 * 1024.0;
  char line[1024];
  std::snprintf(line, sizeof line,
                "MoE: %d experts, top-%d: %.0f parameters in all, %.0f active per token (the FLOPs and MFU count "
                "these); per rank %d experts of each MoE layer (grid.ep = %d), on the rank with the most: %.0f parameters, "
                "state %.3f + %.3f + %.3f MiB (params, grads, optim; ZeRO over expert dp = %d)\n"
                "All-to-all per step on that rank's ep, uniform routing: 4 x its MoE layers x micro-batches x B*T*k rows x "
                "C x %d bytes x (ep-1)/ep = %.0f bytes (the summary's ep figure is the measured traffic)\n",
                c.moe.experts, c.moe.top_k, m.total_params, m.active_params, c.moe.experts / g.ep, g.ep,
                m.expert_params, m.expert_state[0] / mib, m.expert_state[1] / mib, m.expert_state[2] / mib, g.dp / g.ep,
                c.precision.type == PrecisionType::Fp32 ? 4 : 2, m.all_to_all_bytes);
  return line;
}

}  // namespace gridtrain
