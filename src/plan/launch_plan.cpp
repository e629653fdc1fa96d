#include "gridtrain/plan/launch_plan.hpp"

#include <stdexcept>
#include <string>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/model/layout.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {
namespace {

using Problems = std::vector<std::string>;

// train.schedule = interleaved and grid.virtual_stages go together, on a pipeline.
void check_schedule(const Config& c, LaunchPlan& plan, Problems& out) {
  const bool interleaved = c.train.schedule == PipelineSchedule::Interleaved;
  const std::string v = std::to_string(c.grid.virtual_stages);
  if (interleaved && c.grid.virtual_stages < 2)
    out.push_back("train.schedule = interleaved needs grid.virtual_stages >= 2 model chunks per pipeline rank, but "
                  "it is " + v + "; valid: 2 or more, or train.schedule = 1f1b");
  if (!interleaved && c.grid.virtual_stages > 1)
    out.push_back("grid.virtual_stages = " + v + " splits each pipeline rank's layers into chunks for train.schedule "
                  "= interleaved, but train.schedule = " + name_of(c.train.schedule) + "; valid: train.schedule = "
                  "interleaved, or grid.virtual_stages = 1");
  if (interleaved && plan.shape.pp < 2)
    out.push_back("train.schedule = interleaved interleaves model chunks over pipeline ranks, but grid.pp = " +
                  std::to_string(plan.shape.pp) + "; valid: grid.pp >= 2, or train.schedule = 1f1b");
  if (interleaved) plan.virtual_stages = c.grid.virtual_stages;
}

// grid.ep splits dp and each MoE layer's experts.
void check_experts(const Config& c, const GridShape& s, Problems& out) {
  if (s.ep == 1) return;
  const std::string ep = "grid.ep = " + std::to_string(s.ep);
  if (s.ep < 1 || s.dp % s.ep != 0)
    out.push_back(ep + " does not divide grid.dp = " + std::to_string(s.dp) +
                  "; valid: a divisor of grid.dp (the expert-parallel ranks are dp ranks)");
  if (!c.moe.enabled()) {
    out.push_back(ep + " splits the experts of MoE layers, but moe.experts = 0; valid: grid.ep = 1, or moe.experts > 0");
    return;
  }
  if (s.ep > 0 && c.moe.experts % s.ep != 0)
    out.push_back("moe.experts = " + std::to_string(c.moe.experts) + " is not divisible by " + ep +
                  "; valid: grid.ep dividing moe.experts (each ep rank holds moe.experts / grid.ep of each layer)");
}

// grid.cp splits each sequence in 2·cp chunks; what needs a whole sequence on a rank is refused.
void check_context(const Config& c, const GridShape& s, bool sequence_parallel, Problems& out) {
  if (s.cp == 1) return;
  const std::string cp = "grid.cp = " + std::to_string(s.cp), T = std::to_string(c.model.block_size);
  if (c.model.type == ModelType::Cnn) {
    out.push_back(cp + " splits sequences, but model.type = cnn has none; valid: grid.cp = 1");
    return;
  }
  const long long chunks = 2LL * s.cp * (sequence_parallel ? s.tp : 1);
  if (c.model.block_size % chunks != 0)
    out.push_back("model.block_size = " + T + " is not divisible by 2 * " + cp.substr(5) +
                  (sequence_parallel ? " * grid.tp (sequence parallelism splits each cp rank's tokens over tp)" : "") +
                  " = " + std::to_string(chunks) + ": context parallelism holds 2 chunks of the sequence per cp "
                  "rank; valid: a block_size that is a multiple of " + std::to_string(chunks));
  for (const auto& [on, key] : {std::pair{c.data.document_mask, "data.document_mask"},
                                {c.data.reset_position_ids, "data.reset_position_ids"}})
    if (on)
      out.push_back(std::string(key) + " = true with " + cp + ": a document's mask and positions span the chunks "
                    "of other cp ranks, which context parallelism does not exchange; valid: " + key +
                    " = false (data.eod_mask_loss works), or grid.cp = 1");
  if (c.moe.enabled() && c.moe.capacity_factor > 0)
    out.push_back(cp + " with moe.capacity_factor = " + fmt("%g", c.moe.capacity_factor) + ": each expert's "
                  "capacity would count one cp rank's part of a micro-batch, so tokens would drop as no other layout "
                  "drops them; valid: moe.capacity_factor = 0 (dropless), or grid.cp = 1");
}

void check_model(const Config& c, LaunchPlan& plan, Problems& out) {
  const GridShape& s = plan.shape;
  for (auto& p : model_layout_problems(c, s.tp, s.pp)) out.push_back(std::move(p));
  check_experts(c, s, out);
  plan.sequence_parallel = c.grid.sequence_parallel && s.tp > 1;  // one tp rank: nothing to split
  check_context(c, s, plan.sequence_parallel, out);
  plan.cp_comm = c.grid.cp_comm;
  check_schedule(c, plan, out);
  try {  // interleaved: one count per virtual stage
    plan.stage_layers = stage_layers(c.grid.stage_layers, model_layers(c), s.pp * plan.virtual_stages);
  } catch (const std::invalid_argument& e) {
    const std::string v = plan.virtual_stages > 1 ? " (over grid.pp * grid.virtual_stages virtual stages)" : "";
    out.push_back("grid.stage_layers = " + show_key(c, "grid.stage_layers") + v + ": " + e.what());
  }
  if (plan.sequence_parallel && s.cp == 1 && c.model.block_size % s.tp != 0)
    out.push_back("grid.sequence_parallel = true splits the sequence over grid.tp = " + std::to_string(s.tp) +
                  ", but model.block_size = " + std::to_string(c.model.block_size) + " is not divisible by it; "
                  "valid: a block_size that is a multiple of grid.tp, or grid.sequence_parallel = false");
  const long long per_step = static_cast<long long>(c.train.micro_batch) * s.dp;
  if (c.train.global_batch % per_step != 0)
    out.push_back("train.global_batch = " + std::to_string(c.train.global_batch) +
                  " is not divisible by train.micro_batch * dp = " + std::to_string(c.train.micro_batch) + " * " +
                  std::to_string(s.dp) + "; valid: a multiple of " + std::to_string(per_step));
  else
    plan.accumulation = static_cast<int>(c.train.global_batch / per_step);
  if (c.train.schedule == PipelineSchedule::Interleaved && s.pp > 1 && plan.accumulation % s.pp != 0)
    out.push_back("train.schedule = interleaved runs micro-batches in groups of grid.pp = " + std::to_string(s.pp) +
                  ", but a step has " + std::to_string(plan.accumulation) + " (train.global_batch / (micro_batch * dp)"
                  "); valid: a multiple of " + std::to_string(s.pp) + " micro-batches, or train.schedule = 1f1b");
  if (c.train.schedule == PipelineSchedule::ZbH1 && c.optim.zero_stage == 3 && s.dp > 1)
    out.emplace_back("train.schedule = zb-h1 with optim.zero_stage = 3: stage 3 reduce-scatters and frees each layer "
                  "as its backward completes, but zb-h1 computes the linears' weight gradients later, out of that "
                  "order; valid: optim.zero_stage <= 2, or train.schedule = 1f1b");
  const bool model_parallel = s.tp > 1 || s.pp > 1 || s.cp > 1;
  if (model_parallel && c.train.on_oom == OnOom::Backoff)
    out.emplace_back("train.on_oom = backoff needs grid.tp = grid.pp = grid.cp = 1: a rank that runs out of memory "
                  "inside a tensor-parallel all-reduce, a ring attention or mid-schedule would leave its peers "
                  "waiting; use train.on_oom = abort");
  if (c.optim.zero_stage == 3 && s.dp > 1 && c.train.on_oom == OnOom::Backoff)
    out.emplace_back("train.on_oom = backoff with optim.zero_stage = 3: forward and backward all-gather each layer "
                  "over dp, so a rank that runs out of memory among them would leave its peers waiting; use "
                  "train.on_oom = abort, or optim.zero_stage <= 2");
  if (model_parallel && c.optim.type == OptimizerType::OnebitAdam)
    out.emplace_back("optim.type = onebit_adam keeps gradients local after its freeze and supports grid.tp = grid.pp "
                  "= grid.cp = 1 only; use adamw with tp/pp/cp");
}

// Fault injection that could never fire is a mistake in the deck, not a passing test.
void check_faults(const Config& c, const GridShape& s, Problems& out) {
  const std::string ranks = std::to_string(s.size()), last_rank = std::to_string(s.size() - 1);
  if (c.debug.stall_rank >= s.size())
    out.push_back("debug.stall_rank = " + std::to_string(c.debug.stall_rank) + " but the job has " + ranks +
                  " ranks; valid: -1 (off) or 0.." + last_rank);
  if (c.debug.nonfinite == NonfiniteFault::None) return;
  if (c.debug.nonfinite_rank >= s.size())
    out.push_back("debug.nonfinite_rank = " + std::to_string(c.debug.nonfinite_rank) + " but the job has " + ranks +
                  " ranks; valid: 0.." + last_rank);
  if (c.debug.nonfinite_step > c.train.steps)
    out.push_back("debug.nonfinite_step = " + std::to_string(c.debug.nonfinite_step) + " is after the last step (" +
                  std::to_string(c.train.steps) + ")");
  const int stage = c.debug.nonfinite_rank / (s.dp * s.cp * s.tp);  // grid ranks are (pp, dp, cp, tp), tp fastest
  if (c.debug.nonfinite == NonfiniteFault::Loss && stage != s.pp - 1 && c.debug.nonfinite_rank < s.size())
    out.push_back("debug.nonfinite = loss on rank " + std::to_string(c.debug.nonfinite_rank) + ", which is on "
                  "pipeline stage " + std::to_string(stage) + " and computes no loss; valid: a rank of the last "
                  "stage, " + std::to_string((s.pp - 1) * s.dp * s.cp * s.tp) + ".." + last_rank);
}

// train.device and comm.backend resolved (config.cpp rejected the combinations that cannot
// work when both were explicit; here auto meets this build and machine).
void resolve_devices(const Config& c, LaunchPlan& plan, Problems& out) {
  plan.cuda = c.train.device == DeviceKind::Cuda || (c.train.device == DeviceKind::Auto && cuda_available());
  plan.nccl = plan.cuda && c.comm.backend != Backend::Mpi;
  if (plan.cuda) return;
  const std::string resolved =
      c.train.device == DeviceKind::Auto ? " (train.device = auto found no CUDA device)" : "";
  if (c.comm.backend == Backend::Nccl) out.push_back("comm.backend = nccl needs train.device = cuda" + resolved);
  if (c.precision.type == PrecisionType::Fp16)
    out.push_back("precision.type = fp16 needs CUDA" + resolved + "; on the CPU use precision.type = bf16");
}

}  // namespace

std::vector<std::string> layout_problems(const Config& c, const GridShape& shape) {
  LaunchPlan plan;
  plan.shape = shape;
  Problems problems;
  check_model(c, plan, problems);
  return problems;
}

LaunchPlan plan_launch(const Config& c, int world_size, bool resolve_device) {
  LaunchPlan plan;
  plan.shape = resolve_shape(c.grid.dp, c.grid.tp, c.grid.pp, world_size, c.grid.ep, c.grid.cp);  // nothing else is checkable without it
  Problems problems;
  check_model(c, plan, problems);
  check_faults(c, plan.shape, problems);
  if (resolve_device) resolve_devices(c, plan, problems);
  if (c.train.recompute == Recompute::Selective && fused_attention(c))
    plan.warnings.push_back(std::string("train.recompute = selective with sdpa attention (model.attention = ") +
                            name_of(c.model.attention) +
                            ") keeps the same activations as none and adds the attention's forward again: sdpa never "
                            "stores the scores that selective recomputation exists to drop; use train.recompute = "
                            "full to save memory");
  if (problems.size() == 1) throw Error(problems.front());
  if (!problems.empty()) {
    std::string msg = std::to_string(problems.size()) + " problems with this launch:";
    for (const auto& p : problems) msg += "\n  - " + p;
    throw Error(msg);
  }
  return plan;
}

ModelLayout stage_layout(const std::vector<int>& stage_layers, int stage, int chunks, Axis* tp, int tp_size,
                         bool sequence_parallel) {
  const int stages = static_cast<int>(stage_layers.size()) / chunks;
  ModelLayout layout{tp, stage, stages, {}, tp_size, sequence_parallel};
  for (int c = 0; c < chunks; ++c) {
    const auto virtual_stage = static_cast<std::size_t>(c * stages + stage);
    LayerRange r{0, stage_layers.at(virtual_stage)};
    for (std::size_t s = 0; s < virtual_stage; ++s) r.first += stage_layers[s];
    layout.chunks.push_back(r);
  }
  return layout;
}

ModelLayout model_layout(const LaunchPlan& plan, Grid& grid) {
  auto layout = stage_layout(plan.stage_layers, grid.pp().rank(), plan.virtual_stages, &grid.tp(), grid.tp().size(),
                             plan.sequence_parallel);
  layout.ep = &grid.ep();
  layout.cp = &grid.cp();
  layout.cp_comm = plan.cp_comm;
  return layout;
}

int place_rank(const LaunchPlan& plan, const Config& c, Grid& grid) {
  if (!plan.cuda) return -1;
  int index = -1;
  // Nodes may differ (one with fewer GPUs): every rank learns of a failure on any. fn makes
  // collective calls on world, which agree_on() forbids in general: select_cuda_device makes
  // them on every rank before anything can throw, so they stay matched.
  if (auto failure = agree_on(grid.comm(), [&] { index = select_cuda_device(grid.comm(), plan.nccl); }))
    throw Error(std::string("train.device = ") + name_of(c.train.device) + ": " + failure->message);
  try {
    if (plan.nccl) grid.use_nccl();
  } catch (const std::runtime_error& e) {
    throw Error(std::string("comm.backend = nccl: ") + e.what());
  }
  return index;
}

}  // namespace gridtrain
