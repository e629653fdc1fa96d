#include "gridtrain/plan/predict.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>
#include <tuple>

#include "gridtrain/data/samples.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/plan/moe_costs.hpp"
#include "gridtrain/plan/peak.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

// Ring all-reduce of `bytes` on k ranks over `link` (Patarasuk & Yuan 2009).
double allreduce_s(double bytes, int k, const Link& link) {
  if (k <= 1 || bytes == 0) return 0.0;  // nothing to reduce: no message
  return 2.0 * (k - 1) * link.latency_s + 2.0 * (k - 1) / k * bytes / link.bytes_per_s;
}

// A group of k ranks at stride s (the grid places tp fastest, then cp, dp, pp) stays in a node
// when its s·k ranks are a whole part of one node (nodes hold ranks_per_node consecutive ranks).
const Link& link_of(const Machine& m, int stride, int k) {
  const int span = stride * k;
  return span <= m.ranks_per_node && m.ranks_per_node % span == 0 ? m.intra : m.inter;
}

// This stage's part of the model without a grid (layers: per virtual stage, chunks per rank).
ModelLayout stage_part(const Config& c, const StepLayout& l, int stage, const std::vector<int>& layers, int chunks) {
  ModelLayout part = stage_layout(layers, stage, chunks, nullptr, l.tp, c.grid.sequence_parallel);
  part.cp_size = l.cp, part.cp_comm = c.grid.cp_comm;
  return part;
}

// One pipeline stage's parameters on a rank: those over dp, and its experts over dp / ep.
struct StageParams {
  double dense = 0, expert = 0;
  MoeCosts moe;  // zeros for a dense model
  double all() const { return dense + expert; }
};

StageParams stage_params(const Config& c, const DataShape& d, const StepLayout& l, const ModelLayout& part,
                         double whole, int micro_batches, int elem) {
  StageParams s;
  s.dense = static_cast<double>(plan_model(c, d, part)->parameters());  // counts all E experts of a layer
  if (c.moe.experts == 0) return s;
  s.moe = moe_costs(c, l, part, whole, micro_batches, elem);
  if (l.ep == 1) {  // the experts in the dense group, as the trainer reduces and shards them
    s.moe.expert_state = {};
    return s;
  }
  s.expert = s.moe.expert_params;
  s.dense -= s.expert * l.ep;
  return s;
}

// The stage with the most parameters (stage 0 or the last: the embedding and the head).
StageParams largest_stage(const Config& c, const DataShape& d, const StepLayout& l, const std::vector<int>& layers,
                          int chunks, int micro_batches, int elem) {
  const double whole = c.moe.experts > 0 ? static_cast<double>(plan_model(c, d, {})->parameters()) : 0.0;
  StageParams psi;
  for (const int stage : {0, l.pp - 1}) {
    const auto s = stage_params(c, d, l, stage_part(c, l, stage, layers, chunks), whole, micro_batches, elem);
    if (s.all() > psi.all()) psi = s;
  }
  return psi;
}

// The token dispatch's all-to-alls on ep (consecutive dp ranks: stride tp·cp) over M micro-batches.
double all_to_all_s(const StageParams& psi, const StepLayout& l, const Machine& m, double M) {
  if (l.ep == 1) return 0.0;
  const Link& link = link_of(m, l.tp * l.cp, l.ep);
  return 4.0 * psi.moe.stage_layers * M * (l.ep - 1) * link.latency_s + psi.moe.all_to_all_bytes / link.bytes_per_s;
}

// The gradient exchange: dense gradients over dp × cp (stride tp); experts' over the dp / ep
// ranks a stride ep apart (stride tp·cp·ep). ZeRO 3 moves 3/2 the bytes.
double gradient_s(const StageParams& psi, const StepLayout& l, const Machine& m, int grad_bytes) {
  const double zero3 = l.zero == 3 ? 1.5 : 1.0;
  return zero3 * (allreduce_s(psi.dense * grad_bytes, l.replicas(), link_of(m, l.tp, l.replicas())) +
                  allreduce_s(psi.expert * grad_bytes, l.dp / l.ep, link_of(m, l.tp * l.cp * l.ep, l.dp / l.ep)));
}

// Context parallelism's key/value exchange on cp (stride tp) over M micro-batches of stage 0's
// layers: {the transfers in all, what the attention does not hide}. The ring's cp − 1 forward
// steps each overlap one block's attention, 4·b·(T/cp)²·C/t FLOPs (q kᵀ and the weighted sum;
// the causal layout gives every block the same work), its backward's cp − 1 key/value steps two
// blocks' worth, while the key/value gradients' cp hops (home included) wait alone; recomputation
// runs the forward ring again. The all-gather runs before the attention and hides nothing.
std::pair<double, double> context_s(const Config& c, const ModelPlan& first, const StepLayout& l, const Machine& m,
                                    double layers, double M, int elem) {
  if (l.cp == 1) return {0.0, 0.0};
  const Link& link = link_of(m, l.tp, l.cp);
  const auto [forward, backward] = first.context_bytes(c.train.micro_batch, elem);
  const double moves = layers * M * (forward + backward) / link.bytes_per_s;
  if (c.grid.cp_comm == ContextExchange::Allgather) return {moves, moves};
  const double tokens = static_cast<double>(c.model.block_size) / l.cp;
  const double block_s = 4.0 * c.train.micro_batch * tokens * tokens * c.model.n_embd / l.tp / m.flops_per_s;
  const double steps = l.cp - 1, step_s = link.latency_s + forward / steps / link.bytes_per_s;
  const double ring = steps * std::max(0.0, step_s - block_s);
  const double again = c.train.recompute == Recompute::None ? 0.0 : ring;
  return {moves, layers * M * (ring + again + steps * std::max(0.0, step_s - 2.0 * block_s) + l.cp * step_s)};
}

// The schedule's bubble over the compute (parallel/pipeline.hpp). For zb-h1 the weight
// gradients' share: flops_per_item is 6N + 12·L·C·T (the plans), W its 2N.
double bubble_share(const Config& run, const ModelPlan& first, int pp, int micro_batches, int v) {
  if (run.train.schedule != PipelineSchedule::ZbH1) return bubble_ratio(pp, micro_batches, v);
  const double per_item = first.flops_per_item();
  const double attention = 12.0 * run.model.n_layer * run.model.n_embd * run.model.block_size;
  return zb_h1_bubble_ratio(pp, micro_batches, (per_item - attention) / 3.0 / (per_item + first.recompute_flops_per_item()));
}

}  // namespace

Machine device_machine(const std::string& name, PrecisionType precision, double achievable) {
  struct Entry {
    const char* name;
    const char* datasheet;  // the peak table's name (plan/peak.hpp)
    double memory, nvlink, infiniband;  // bytes; bytes/s per GPU and direction
  };
  // DGX/HGX nodes of 8: NVLink 3 (A100) 300 GB/s, NVLink 4 (H100, H200) 450 GB/s per direction;
  // one HDR (200 Gb/s) or NDR (400 Gb/s) InfiniBand port per GPU.
  static constexpr std::array<Entry, 3> kTable = {{{"a100", "A100", 80e9, 300e9, 25e9},
                                                   {"h100", "H100", 80e9, 450e9, 50e9},
                                                   {"h200", "H200", 141e9, 450e9, 50e9}}};
  for (const auto& e : kTable)
    if (name == e.name) {
      const double peak = 1e12 * datasheet_peak_tflops(e.datasheet, precision).value();
      return {.name = e.datasheet, .flops_per_s = peak * achievable, .peak_flops = peak, .memory_bytes = e.memory,
              .ranks_per_node = 8, .intra = {5e-6, e.nvlink}, .inter = {10e-6, e.infiniband}};
    }
  throw Error("predict: --device " + name + " is not in the device table; valid: a100, h100, h200, or cpu (the "
              "matmul probe), or give --flops-per-s and the links yourself");
}

Prediction predict_step(const Config& c, const DataShape& data, const StepLayout& l, const Machine& m,
                        const PredictOptions& o) {
  Prediction p;
  p.layout = l;
  const int N = l.size(), b = c.train.micro_batch;
  Config run = c;  // the layout as a run would be launched: its ZeRO stage, layers split evenly
  run.optim.zero_stage = l.zero;
  run.grid.stage_layers.clear();
  const bool interleaved = c.train.schedule == PipelineSchedule::Interleaved && l.pp > 1;
  if (!interleaved && c.train.schedule == PipelineSchedule::Interleaved)  // one stage: nothing to interleave
    run.train.schedule = PipelineSchedule::OneFOneB, run.grid.virtual_stages = 1;
  const int v = interleaved ? c.grid.virtual_stages : 1;
  const auto problems = layout_problems(run, l);
  if (!problems.empty()) {
    p.infeasible = problems.front();
    return p;
  }
  p.micro_batches = c.train.global_batch / (b * l.dp);
  const double M = p.micro_batches;
  const auto layers = stage_layers({}, model_layers(c), l.pp * v);
  const auto first = plan_model(c, data, stage_part(c, l, 0, layers, v));
  int rank_layers = 0;  // stage 0's, over its chunks
  for (int k = 0; k < v; ++k) rank_layers += layers[static_cast<std::size_t>(k * l.pp)];

  // Compute: the step's FLOPs spread evenly over the ranks, at each rank's share of its node.
  const double items = static_cast<double>(first->items_per_sample()) * c.train.global_batch;
  const double model_flops = first->flops_per_item() * items;
  const int act = c.precision.type == PrecisionType::Fp32 ? 4 : 2;
  const StageParams psi = largest_stage(run, data, l, layers, v, p.micro_batches, act);
  const double flops = model_flops + first->recompute_flops_per_item() * items;
  const int on_node = std::min(N, m.ranks_per_node);
  const double share = m.cores_per_node > 0 ? std::min(1.0, m.cores_per_node / on_node) : 1.0;
  p.compute_s = flops / N / (m.flops_per_s * share);
  p.bubble_s = p.compute_s * bubble_share(run, *first, l.pp, p.micro_batches, v);

  // The bytes of one micro-batch's inter-stage activations: b·T·C, or with sequence parallelism
  // this rank's b·(T/t)·C (only models of several stages have them).
  auto activation = [&] {
    const auto shape = first->activation_shape(b);
    double n = shape.empty() ? 0.0 : act;
    for (const auto d : shape) n *= static_cast<double>(d);
    return n;
  };
  const bool sp = c.grid.sequence_parallel && l.tp > 1;
  if (l.tp > 1) {
    // All-reduces of b·T·C per layer: two forward, two backward, and two more in a full
    // recompute. Sequence parallelism's all-gathers and reduce-scatters cost half an all-reduce
    // each, the same bytes, plus two all-gathers in backward that fetch the column-parallel
    // layers' inputs again: 5 instead of 4.
    const int per_layer = (sp ? 5 : 4) + (c.train.recompute == Recompute::Full ? 2 : 0);
    const double full = sp ? activation() * l.tp : activation();
    p.tp_s = rank_layers * M * per_layer * allreduce_s(full, l.tp, link_of(m, 1, l.tp));
  }
  if (l.pp > 1) {  // between nodes, the tp ranks send a slice each (Megatron's scatter/gather), as SP does anyway
    const Link& link = link_of(m, l.tp * l.cp * l.dp, l.pp);
    const double bytes = &link == &m.inter && !sp ? activation() / l.tp : activation();
    p.pp_s = 2.0 * M * v * (link.latency_s + bytes / link.bytes_per_s);  // each micro-batch passes a rank v times
  }
  p.ep_s = all_to_all_s(psi, l, m, M);
  std::tie(p.cp_transfer_s, p.cp_s) = context_s(c, *first, l, m, rank_layers, M, act);
  p.dp_s = gradient_s(psi, l, m, o.grad_bytes);
  p.step_s = p.compute_s + p.bubble_s + p.tp_s + p.pp_s + p.ep_s + p.cp_s + p.dp_s;
  p.items_per_s = items / p.step_s;
  p.mfu = model_flops / N / p.step_s / m.peak_flops;
  p.tflops_per_rank = flops / N / p.step_s / 1e12;

  // Memory: model state as ZeRO shards it, autocast's copies of fp32 weights, activations in
  // flight on stage 0.
  const auto zero = zero_state_bytes(l.zero, psi.dense, c.optim.type, c.precision.weights, l.replicas());
  const auto& experts = psi.moe.expert_state;  // over expert dp
  p.state_bytes = zero[0] + zero[1] + zero[2] + experts[0] + experts[1] + experts[2];
  const bool casts = act == 2 && c.precision.weights == PrecisionType::Fp32;
  const int in_flight = in_flight_micro_batches(run.train.schedule, 0, l.pp, p.micro_batches, v);
  p.memory_bytes = p.state_bytes + (casts ? 2.0 * psi.all() : 0.0) + first->activation_bytes(b, act, in_flight);
  if (m.memory_bytes > 0 && p.memory_bytes > m.memory_bytes) p.infeasible = "out of memory";
  return p;
}

std::vector<Prediction> rank_layouts(const Config& c, const DataShape& data, int ranks, const Machine& m,
                                     const PredictOptions& o) {
  std::vector<Prediction> out;
  for (int tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0 || tp > m.ranks_per_node) continue;  // tensor parallelism inside a node
    for (int pp = 1; pp <= ranks / tp; ++pp) {
      if ((ranks / tp) % pp != 0 || (ranks / tp / pp) % c.grid.cp != 0) continue;
      const int dp = ranks / tp / pp / c.grid.cp;
      for (int zero = 0; zero <= (dp * c.grid.cp > 1 ? 3 : 0); ++zero) {
        out.push_back(predict_step(c, data, {dp, tp, pp, zero, c.grid.ep, c.grid.cp}, m, o));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.infeasible.empty() != b.infeasible.empty()) return a.infeasible.empty();
    return a.step_s < b.step_s;
  });
  return out;
}

std::string format_predictions(const std::vector<Prediction>& ps, const char* item) {
  auto right4 = [](const std::string& t) { return std::string(t.size() < 4 ? 4 - t.size() : 0, ' ') + t + " "; };
  char line[256];
  std::string out;
  for (const AxisInfo& a : kAxes) out += right4(a.name);
  std::snprintf(line, sizeof line, "%4s %6s %10s %9s %9s %9s %9s %9s %9s %9s %11s %6s %8s %8s %8s  %s\n", "zero", "m",
                "step ms", "compute", "bubble", "tp", "pp", "ep", "cp", "dp", (std::string(item) + "s/s").c_str(), "MFU%",
                "TF/rank", "state GB", "mem GiB", "");
  out += line;
  for (const auto& p : ps) {
    const auto& l = p.layout;
    for (const AxisInfo& a : kAxes) out += right4(std::to_string(l[a.id]));
    std::snprintf(line, sizeof line,
                  "%4d %6d %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %11.4g %6.1f %8.3g %8.4g %8.3g  %s\n", l.zero,
                  p.micro_batches, 1e3 * p.step_s, 1e3 * p.compute_s, 1e3 * p.bubble_s,
                  1e3 * p.tp_s, 1e3 * p.pp_s, 1e3 * p.ep_s, 1e3 * p.cp_s, 1e3 * p.dp_s, p.items_per_s, 100.0 * p.mfu, p.tflops_per_rank,
                  p.state_bytes / 1e9, p.memory_bytes / (1024.0 * 1024.0 * 1024.0), p.infeasible.c_str());
    out += line;
  }
  return out;
}

namespace {

// The machine of a request: a device-table entry or this CPU, with the links given.
Machine request_machine(const Config& c, const PredictRequest& r) {
  Machine m;
  if (r.device == "cpu") {
    double rate = r.flops_per_s;
    if (rate <= 0) {
      torch::set_num_threads(1);  // a core's rate: the ranks share the node's cores
      rate = 1e9 * probe_matmul_gflops(c.precision.type, false);
    }
    const Link shared{5e-6, 5e9};  // shared memory: bench_allreduce_bandwidth's 16 MiB bus bandwidth here
    m = {.name = r.flops_per_s > 0 ? "this CPU (FLOP/s given)" : "this CPU (matmul probe, one thread)",
         .flops_per_s = rate, .peak_flops = rate, .ranks_per_node = r.ranks,
         .cores_per_node = static_cast<double>(std::thread::hardware_concurrency()), .intra = shared, .inter = shared};
  } else {
    m = device_machine(r.device, c.precision.type, r.achievable);
  }
  if (r.flops_per_s > 0) m.flops_per_s = r.flops_per_s;
  if (r.ranks_per_node > 0) m.ranks_per_node = r.ranks_per_node;
  if (r.cores_per_node > 0) m.cores_per_node = r.cores_per_node;
  if (r.intra_gbps > 0) m.intra.bytes_per_s = 1e9 * r.intra_gbps;
  if (r.inter_gbps > 0) m.inter.bytes_per_s = 1e9 * r.inter_gbps;
  if (r.intra_us >= 0) m.intra.latency_s = 1e-6 * r.intra_us;
  if (r.inter_us >= 0) m.inter.latency_s = 1e-6 * r.inter_us;
  return m;
}

std::string csv(const std::vector<Prediction>& ps) {
  std::string out;
  for (const AxisInfo& a : kAxes) out += std::string(a.name) + ",";
  out += "zero,micro_batches,step_s,compute_s,bubble_s,tp_s,pp_s,ep_s,cp_s,cp_transfer_s,dp_s,items_per_s,mfu,"
         "tflops_per_rank,state_bytes,memory_bytes,infeasible\n";
  char line[512];
  for (const auto& p : ps) {
    for (const AxisInfo& a : kAxes) out += std::to_string(p.layout[a.id]) + ",";
    std::snprintf(line, sizeof line, "%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s\n",
                  p.layout.zero, p.micro_batches, p.step_s, p.compute_s,
                  p.bubble_s, p.tp_s, p.pp_s, p.ep_s, p.cp_s, p.cp_transfer_s, p.dp_s, p.items_per_s, p.mfu, p.tflops_per_rank, p.state_bytes,
                  p.memory_bytes, p.infeasible.c_str());
    out += line;
  }
  return out;
}

}  // namespace

int predict(const Config& deck, const PredictRequest& r, MPI_Comm world, Log& log) {
  Config cfg = deck;
  if (r.recompute) cfg.train.recompute = Recompute::Full;
  set_matmul_backend(cfg.model.matmul);  // --device cpu probes the matmul the deck would run
  std::vector<std::string> bad;  // every problem of the request, before any work
  if (r.ranks < 1) bad.push_back("--ranks " + std::to_string(r.ranks) + ": valid: an integer >= 1");
  const auto& L = r.layout;
  const long long cp = cfg.grid.cp;
  const bool layout_ok = L.empty() || ((L.size() == 3 || L.size() == 4) && L[0] >= 1 && L[1] >= 1 && L[2] >= 1 &&
                                       cp * L[0] * L[1] * L[2] == r.ranks && (L.size() == 3 || (L[3] >= 0 && L[3] <= 3)));
  if (!layout_ok)
    bad.push_back("--layout " + comma_list(L) + ": valid: dp,tp,pp[,zero] with each >= 1, dp·tp·pp" +
                  (cp > 1 ? "·cp (grid.cp = " + std::to_string(cp) + ")" : "") + " = --ranks (" +
                  std::to_string(r.ranks) + ") and zero in 0..3");
  if (r.device != "cpu" && r.device != "a100" && r.device != "h100" && r.device != "h200")
    bad.push_back("--device " + r.device + ": valid: a100, h100, h200, cpu");
  if (!(r.achievable > 0 && r.achievable <= 1))
    bad.push_back("--achievable " + fmt("%g", r.achievable) + ": valid: a fraction in (0, 1]");
  if (r.grad_bytes != 0 && r.grad_bytes != 2 && r.grad_bytes != 4)
    bad.push_back("--grad-bytes " + std::to_string(r.grad_bytes) + ": valid: 2, 4 (or 0: the deck's precision.weights)");
  if (r.top < 1) bad.push_back("--top " + std::to_string(r.top) + ": valid: an integer >= 1");
  if (r.flops_per_s < 0 || r.intra_gbps < 0 || r.inter_gbps < 0 || r.ranks_per_node < 0 || r.cores_per_node < 0)
    bad.emplace_back("--flops-per-s, --*-gbps, --ranks-per-node and --cores-per-node: valid: values >= 0 (0: the machine's)");
  if (!bad.empty()) {
    std::string msg = "predict: " + std::to_string(bad.size()) + " problem(s):";
    for (const auto& b : bad) msg += "\n  - " + b;
    throw Error(msg);
  }
  const DataShape data = data_shape(cfg, world);
  const Machine m = request_machine(cfg, r);
  const PredictOptions o{r.grad_bytes > 0 ? r.grad_bytes : weight_bytes(cfg.precision.weights)};
  std::vector<Prediction> ps;
  if (!L.empty()) {
    const StepLayout layout{L[0], L[1], L[2], L.size() == 4 ? L[3] : cfg.optim.zero_stage, cfg.grid.ep, cfg.grid.cp};
    ps.push_back(predict_step(cfg, data, layout, m, o));
  } else {
    ps = rank_layouts(cfg, data, r.ranks, m, o);
  }
  if (ps.size() > static_cast<std::size_t>(r.top)) ps.resize(static_cast<std::size_t>(r.top));
  const char* item = plan_model(cfg, data, {})->item();
  if (r.csv) {
    log.print(csv(ps));
    return 0;
  }
  const std::string recompute =
      cfg.train.recompute == Recompute::None ? "" : std::string(", recomputation ") + name_of(cfg.train.recompute);
  char head[512];
  std::snprintf(head, sizeof head,
                "Predicted step of %s (%s) on %d ranks of %s: %.4g TFLOP/s per rank achievable, %.4g peak, %d ranks per "
                "node, links %.3g GB/s + %.3g us inside a node, %.3g GB/s + %.3g us between nodes%s\n"
                "Model state (state GB, 10^9 bytes, as the ZeRO paper counts): %s\n",
                cfg.deck_name.c_str(), name_of(cfg.model.type), r.ranks, m.name.c_str(), m.flops_per_s / 1e12,
                m.peak_flops / 1e12, m.ranks_per_node, m.intra.bytes_per_s / 1e9, 1e6 * m.intra.latency_s,
                m.inter.bytes_per_s / 1e9, 1e6 * m.inter.latency_s, recompute.c_str(),
                state_accounting(cfg.optim.type, cfg.precision.weights).c_str());
  log.print(std::string(head) + format_predictions(ps, item));
  return 0;
}

}  // namespace gridtrain
