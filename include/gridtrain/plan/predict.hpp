// `gridtrain predict`: an analytic model of one training step's time for a layout (dp, tp, pp,
// ZeRO stage) on a machine, from the deck's ModelPlan, so that a layout can be chosen before an
// allocation is spent. Per rank and step, with N = dp·tp·pp ranks and m = global_batch /
// (micro_batch·dp) micro-batches:
//
//   compute  F / (N · R)            F: the step's training FLOPs (ModelPlan::flops_per_item × items;
//                                   × 4/3 with full activation recomputation: one more forward),
//                                   R: achievable FLOP/s per rank (its share of a node's cores on a CPU)
//   bubble   compute · (p − 1) / m   1F1B / GPipe idle time (Narayanan et al. 2021, §2.2: the bubble
//                                   is (p − 1)/(m + p − 1) of the step); zb-h1: × max(0, 1 − 3w),
//                                   w the weight gradients' 2N of the step's FLOPs per item
//                                   (zb_h1_bubble_ratio)
//   tp       per layer and micro-batch 4 all-reduces of b·T·C activations (6 with recomputation;
//            Megatron-LM, Shoeybi et al. 2019 §3, Narayanan et al. §3.2)
//   pp       2 point-to-point transfers of b·T·C per micro-batch (activation and its gradient),
//            1/t of it across nodes (Narayanan et al. §4.1's scatter/gather)
//   dp       the gradient all-reduce of the rank's Ψ parameters: 2(d − 1)/d · Ψ · grad_bytes (ZeRO
//            stages 1–2 the same volume as reduce-scatter + all-gather, stage 3 × 3/2; Rajbhandari
//            et al. 2020 §7)
//   ep       mixtures of experts: per MoE layer and micro-batch 4 all-to-alls (dispatch, combine and
//            their gradients) of the B·T·k routed rows, (ep − 1)/ep of them leaving the rank:
//            4·L_moe·m·(ep − 1)·α + moe_costs' all_to_all_bytes / β; the dp term reduces the experts'
//            gradients over the dp / ep expert-data-parallel ranks, the rest over dp; tp splits the
//            experts as the dense MLP (expert tensor parallelism), with the same tp all-reduces
//   all-reduce on k ranks as a ring: 2(k − 1)·α + 2(k − 1)/k · bytes / β (Patarasuk & Yuan 2009),
//   α, β of the link the group spans: inside a node (ranks_per_node) or across nodes; ranks are
//   placed as gridtrain's grid places them, tp fastest, then dp, then pp.
//   step = compute + bubble + tp + pp + ep + dp (communication counted as exposed).
// Memory per rank: the model state of zero_state_bytes (optim/optimizer.hpp; fp32 weights: weights
// 4Ψ, gradients 4Ψ, optimizer state 8Ψ AdamW or 4Ψ SGD; precision.weights = bf16 | fp16: 2Ψ, 2Ψ
// and 12Ψ or 8Ψ with the fp32 master) divided by dp as the ZeRO stage says (an MoE's experts' by
// dp / ep), autocast's bf16/fp16 copies of fp32 weights 2Ψ, activations of the micro-batches in
// flight (ModelPlan::activation_bytes; with recomputation each layer keeps only its b·T·C input).
#pragma once
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/data/data_shape.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

/// One link class: latency α (seconds per message) and bandwidth β (bytes/s per rank).
struct Link {
  double latency_s = 0;
  double bytes_per_s = 0;
};

struct Machine {
  std::string name;
  double flops_per_s = 0;      ///< achievable per rank (device: peak × achievable fraction)
  double peak_flops = 0;       ///< per rank, the MFU denominator
  double memory_bytes = 0;     ///< per rank; 0: not checked
  int ranks_per_node = 1;      ///< GPUs (or MPI ranks) per node
  double cores_per_node = 0;   ///< CPU nodes: ranks beyond this many share the cores; 0: a device per rank
  Link intra, inter;           ///< inside a node, between nodes
};

/// The machine of a device-table entry (a100, h100, h200: datasheet dense peak at `precision`,
/// memory, NVLink and 8 × InfiniBand links of a DGX/HGX node) with R = peak × achievable.
/// Throws gridtrain::Error for another name, listing the known ones.
Machine device_machine(const std::string& name, PrecisionType precision, double achievable);

/// A layout to weigh: the grid's shape (every axis's size) and the ZeRO stage. The constructor, not
/// aggregate initialisation, so that {dp, tp, pp, zero} can never fill GridShape::ep with the stage.
struct StepLayout : GridShape {
  int zero = 0;
  StepLayout() = default;
  StepLayout(int dp_, int tp_, int pp_, int zero_, int ep_ = 1, int cp_ = 1) : GridShape{dp_, tp_, pp_, ep_, cp_}, zero(zero_) {}
};

struct Prediction {
  StepLayout layout;
  int micro_batches = 0;         ///< m
  double compute_s = 0, bubble_s = 0, tp_s = 0, pp_s = 0, ep_s = 0, cp_s = 0, dp_s = 0;
  double cp_transfer_s = 0;      ///< cp's key/value transfers in all: cp_s is what the attention does not hide
  double step_s = 0;             ///< their sum
  double items_per_s = 0;        ///< tokens (or images) per second, the whole job
  double mfu = 0;                ///< model FLOPs (no recomputation) / (step · N · peak)
  double tflops_per_rank = 0;    ///< the FLOPs executed (recomputation included) per rank and second / 1e12
  double state_bytes = 0;        ///< per rank: parameters, gradients, optimizer state (zero_state_bytes)
  double memory_bytes = 0;       ///< per rank, the largest stage's: state, autocast copies, activations
  std::string infeasible;        ///< why the layout cannot run ("" when it can)
};

struct PredictOptions {
  int grad_bytes = 4;      ///< bytes per gradient element in the dp all-reduce (4 fp32, 2 bf16)
};

/// The prediction for one layout (infeasible set, the times still filled where they mean
/// something). data: what the data fix about the model (data/samples.hpp data_shape).
Prediction predict_step(const Config& c, const DataShape& data, const StepLayout& layout, const Machine& m,
                        const PredictOptions& o);

/// Every (dp, tp, pp, zero) with dp·cp·tp·pp = ranks (cp, ep: the deck's) and tp inside a node, predicted; the feasible
/// ones first, by step time, then those a run would refuse (plan/launch_plan.hpp
/// layout_problems: tp dividing n_head, pp <= n_layer, the batch split, cnn data parallel only,
/// options that need tp = pp = 1) or that run out of memory, each with why.
std::vector<Prediction> rank_layouts(const Config& c, const DataShape& data, int ranks, const Machine& m,
                                     const PredictOptions& o);

/// The predictions as a fixed-width table (times in ms, model state in GB = 10^9 bytes as the ZeRO
/// paper counts, memory in GiB), with a header.
std::string format_predictions(const std::vector<Prediction>& p, const char* item);

/// `gridtrain predict`'s request .
struct PredictRequest {
  int ranks = 0;                ///< target rank (GPU) count
  std::vector<int> layout;      ///< dp,tp,pp[,zero] to predict alone (cp, ep: the deck's); empty: rank every layout
  std::string device = "cpu";   ///< a100 | h100 | h200 | cpu (the matmul probe on this machine)
  double achievable = 0.5;      ///< device: fraction of the datasheet peak that compute reaches
  double flops_per_s = 0;       ///< achievable FLOP/s per rank; overrides the device's or the probe's
  int ranks_per_node = 0;       ///< 0: the device's node (8 GPUs) or, on cpu, every rank on one node
  double cores_per_node = 0;    ///< cpu: 0 = this machine's cores
  double intra_gbps = 0, intra_us = -1, inter_gbps = 0, inter_us = -1;  ///< links; 0 / -1: the machine's
  bool recompute = false;       ///< full activation recomputation (train.recompute = full); else the deck's
  int grad_bytes = 0;           ///< bytes per gradient element all-reduced over dp; 0: precision.weights
  int top = 10;                 ///< layouts listed
  bool csv = false;             ///< CSV rows instead of the table
};
/// Prints the predicted step time (and its parts, throughput, MFU, memory) of r.layout, or of
/// every layout of r.ranks ranks ranked, for cfg's model and batch. Rank 0 prints; no grid is
/// built. Throws gridtrain::Error for an unknown device, a bad layout or unreadable data.
int predict(const Config& cfg, const PredictRequest& r, MPI_Comm world, Log& log);

}  // namespace gridtrain
