// gridtrain --dry-run: what a deck will cost on this launch's grid, per rank and per pipeline
// stage, without training.
#include "gridtrain/plan/dry_run.hpp"

#include <array>
#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/data/samples.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/plan/moe_costs.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {
namespace {

// The ZeRO formula (zero_state_bytes) for every stage next to each other, for rank 0's Ψ.
// ranks: dp, or dp × cp (`over`), the replicas ZeRO shards over.
std::string zero_table(int stage, double psi, OptimizerType type, PrecisionType weights, int ranks, const char* over) {
  char line[512];
  std::snprintf(line, sizeof line,
                "ZeRO over %s = %d (Ψ = %.0f parameters on rank 0; accounting: %s), MiB per rank:\n"
                "%6s %9s %9s %9s %9s\n",
                over, ranks, psi, state_accounting(type, weights).c_str(), "zero", "params", "grads", "optim", "sum");
  std::string text = line;
  const double mib = 1024.0 * 1024.0;
  for (int s = 0; s <= 3; ++s) {
    const auto b = zero_state_bytes(s, psi, type, weights, ranks);
    std::snprintf(line, sizeof line, "%6d %9.3f %9.3f %9.3f %9.3f%s\n", s, b[0] / mib, b[1] / mib, b[2] / mib,
                  (b[0] + b[1] + b[2]) / mib,
                  s == stage ? "   <- optim.zero_stage" : "");
    text += line;
  }
  if (stage > 0)  // stage 2 frees the buckets only after the exchange
    text += "The per-rank estimate counts gridtrain's peaks: at stages 1-2 gradients G + G/dp (whole buckets fill "
            "during backward, and the reduced shard is kept; G = the grads column at stage 0); at stage 3 two units "
            "(layers) whole beside the shards, for parameters and for gradients (the one in use and the next).\n";
  return text;
}

// This rank's estimate, MiB: parameters, gradients, optimizer state, autocast copies,
// activations, checkpoint snapshot, total; and its parameter count first.
constexpr int kColumns = 8;
// A rank's MoeCosts beside them: expert parameters, their three state bytes, all-to-all bytes.
constexpr int kMoeFields = 5;

// The estimate of the rank that holds `model` at `layout` (its MoE costs: moe).
std::array<double, kColumns> rank_estimate(const Config& cfg, const LaunchPlan& plan, const ModelLayout& layout,
                                           const ModelPlan& model, const MoeCosts& moe, int elem) {
  const GridShape& g = plan.shape;
  const int in_flight =
      in_flight_micro_batches(cfg.train.schedule, layout.stage, layout.stages, plan.accumulation, plan.virtual_stages);
  const double n = static_cast<double>(model.parameters()), mib = 1024.0 * 1024.0;
  const int zero = g.replicas() > 1 ? cfg.optim.zero_stage : 0;  // as the Reducer: nothing to shard on one replica
  const double w = zero_state_bytes(0, n, cfg.optim.type, cfg.precision.weights, 1)[0];  // unsharded
  const double units = zero == 3 ? 2 * w / model.units() : 0.0;  // stage 3: the unit in use and the next, whole
  // Each group's parameters, gradients and optimizer state, the dense ones' over dp × cp and the
  // experts' over dp / ep × cp: ZeRO 1–2 keep the whole gradients G while backward fills the buckets,
  // plus the reduced shard, and shard the optimizer state; stage 3 keeps shards of all three.
  const auto group_state = [&](double params, int ranks) {
    const int z = ranks > 1 ? cfg.optim.zero_stage : 0;
    const auto s = zero_state_bytes(0, params, cfg.optim.type, cfg.precision.weights, 1);
    if (z == 3) return std::array<double, 3>{s[0] / ranks, s[1] / ranks, s[2] / ranks};
    return std::array<double, 3>{s[0], s[1] + (z > 0 ? s[1] / ranks : 0.0), s[2] / (z > 0 ? ranks : 1)};
  };
  const auto dense = group_state(n - moe.expert_params, g.replicas()),
             experts = group_state(moe.expert_params, g.dp / g.ep * g.cp);
  const bool casts = elem == 2 && cfg.precision.weights == PrecisionType::Fp32;  // autocast's 2-byte weight copies
  std::array<double, kColumns> row = {
      n,
      (dense[0] + experts[0] + units) / mib,
      (dense[1] + experts[1] + units) / mib,
      (dense[2] + experts[2]) / mib,
      casts ? 2 * n / mib : 0.0,
      model.activation_bytes(cfg.train.micro_batch, elem, in_flight) / mib,
      // the host copy of the fp32 weights (the masters) and the optimizer state
      cfg.checkpoint.enabled() ? (4 * n + optimizer_state_bytes_per_param(cfg.optim.type) * n) / mib : 0.0,
      0.0};
  for (int c = 1; c + 1 < kColumns; ++c) row[kColumns - 1] += row[c];
  return row;
}

// Context parallelism's key/value traffic of stage 0's ranks (LanguageModelPlan::context_bytes).
std::string context_line(const Config& cfg, const LaunchPlan& plan, const ModelPlan& model, int elem) {
  if (plan.shape.cp == 1) return "";
  const auto [forward, backward] = model.context_bytes(cfg.train.micro_batch, elem);
  const double mib = 1024.0 * 1024.0, layers = static_cast<double>(plan.stage_layers.at(0)) * plan.virtual_stages;
  char line[512];
  std::snprintf(line, sizeof line,
                "Context parallelism over cp = %d (%s): each rank holds %d of %d tokens a window; it sends %.3f MiB of "
                "keys and values per layer and micro-batch forward, %.3f MiB backward; %.1f MiB per step on stage 0 "
                "(%.0f layers x %d micro-batches)\n",
                plan.shape.cp, name_of(cfg.grid.cp_comm), cfg.model.block_size / plan.shape.cp, cfg.model.block_size,
                forward / mib, backward / mib, (forward + backward) * layers * plan.accumulation / mib, layers,
                plan.accumulation);
  return line;
}

}  // namespace

int dry_run(const Config& cfg, MPI_Comm world, Log& log) {
  const DataShape data = data_shape(cfg, world);
  int world_size = 1;
  MPI_Comm_size(world, &world_size);
  const LaunchPlan plan = plan_launch(cfg, world_size, /*resolve_device=*/false);
  const GridShape g = plan.shape;
  Grid grid(world, g, cfg.comm.timeout_s);
  const ModelLayout layout = model_layout(plan, grid);
  const auto model = plan_model(cfg, data, layout);  // this rank's part, counted without building it
  const int M = plan.accumulation;
  const int elem = cfg.precision.type == PrecisionType::Fp32 ? 4 : 2;
  const MoeCosts moe = cfg.moe.enabled()
      ? moe_costs(cfg, g, layout, static_cast<double>(plan_model(cfg, data, {})->parameters()), M, elem)
      : MoeCosts{};
  const auto row = rank_estimate(cfg, plan, layout, *model, moe, elem);
  // Rank 0 prints one line per stage (its dp = 0, tp = 0 rank) and the maximum over all ranks.
  // The columns, the stage, whether the rank leads it, and its MoE costs.
  constexpr int kFields = kColumns + 2 + kMoeFields;
  const double mine[kFields] = {row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7],
                                static_cast<double>(layout.stage),
                                grid.represents({AxisId::Dp, AxisId::Cp, AxisId::Tp}) ? 1.0 : 0.0,
                                moe.expert_params, moe.expert_state[0], moe.expert_state[1], moe.expert_state[2],
                                moe.all_to_all_bytes};
  std::vector<double> all(static_cast<std::size_t>(kFields * g.size()));
  grid.world().all_gather(mine, all.data(), sizeof mine, "dry-run estimates").wait();

  const std::string schedule = std::string(name_of(cfg.train.schedule)) +
                               (plan.virtual_stages > 1 ? ", " + std::to_string(plan.virtual_stages) + " chunks per rank" : "");
  std::string axes;  // "2 (dp) x 2 (tp, sequence parallel) x 1 (pp)"
  for (const AxisInfo& a : kAxes)
    if (a.cart_dim >= 0)
      axes += (axes.empty() ? "" : " x ") + std::to_string(g[a.id]) + " (" + a.name +
              (a.id == AxisId::Tp && plan.sequence_parallel ? ", sequence parallel" : "") + ")";
  if (g.ep > 1) axes += ", experts over " + std::to_string(g.ep) + " (ep) inside dp";
  if (g.cp > 1) axes += std::string(", cp_comm ") + name_of(cfg.grid.cp_comm);
  char line[512];
  std::snprintf(line, sizeof line,
                "Dry run: %s, grid %s, micro-batch %d x %d micro-batches per step (%s), "
                "precision %s (weights %s), optimizer %s\n"
                "Estimated memory per rank, MiB (activations: Korthikanti et al. 2022, recompute %s, %d micro-batch(es) "
                "in flight on stage 0; plus LibTorch, MPI and the dataset):\n"
                "%6s %12s %9s %9s %9s %9s %11s %9s %9s\n",
                name_of(cfg.model.type), axes.c_str(), cfg.train.micro_batch, M, schedule.c_str(),
                name_of(cfg.precision.type), name_of(cfg.precision.weights), name_of(cfg.optim.type),
                name_of(cfg.train.recompute),
                in_flight_micro_batches(cfg.train.schedule, 0, g.pp, M, plan.virtual_stages),
                "stage", "parameters",
                "params", "grads", "optim", "casts", "activations", "snapshot", "total");
  std::string text = line;
  double worst = 0;
  MoeCosts most = moe;  // the rank's with the most experts (pipeline stages differ in MoE layers)
  for (int r = 0; r < g.size(); ++r) {
    const double* v = &all[static_cast<std::size_t>(kFields * r)];
    worst = std::max(worst, v[kColumns - 1]);
    if (const double* e = v + kColumns + 2; e[0] > most.expert_params)
      most.expert_params = e[0], most.expert_state = {e[1], e[2], e[3]}, most.all_to_all_bytes = e[4];
    if (v[kColumns + 1] == 0) continue;
    std::snprintf(line, sizeof line, "%6.0f %12.0f %9.1f %9.1f %9.1f %9.1f %11.1f %9.1f %9.1f\n", v[kColumns], v[0],
                  v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    text += line;
  }
  const double items = cfg.train.global_batch * static_cast<double>(model->items_per_sample());
  const double flops = model->flops_per_item() * items, redone = model->recompute_flops_per_item() * items;
  std::snprintf(line, sizeof line,
                "Largest total over all %d ranks: %.1f MiB\nFLOPs per step: %.4g (%.4g per rank; %s)%s\n", g.size(),
                worst, flops, flops / g.size(), model->flops_formula(),
                redone > 0 ? fmt(", plus %.4g recomputed", redone).c_str() : "");
  log.print(text + line + (cfg.moe.enabled() ? describe(most, cfg, g) : "") + context_line(cfg, plan, *model, elem) +
            (g.replicas() > 1 ? zero_table(cfg.optim.zero_stage, all[0], cfg.optim.type, cfg.precision.weights, g.replicas(),
                                            g.cp > 1 ? "dp x cp" : "dp")
                           : "") +
            (g.dp > 1 && g.ep > 1 ? "The table shards all of Ψ over dp; the experts' state shards over dp / ep "
                                    "instead, as the per-rank estimate and the MoE line count.\n"
                                  : ""));
  return 0;
}

}  // namespace gridtrain
