// gridtrain predict's step-time model (plan/predict.hpp): its terms against their formulas, the
// layout ranking, and the Megatron-LM paper's measured throughput (Narayanan et al. 2021,
// Table 1) within 25 %, and the ZeRO paper's model state per GPU within 2 %. No MPI traffic;
// tagged [np2] to run in the MPI suite, which links LibTorch.
#include <catch2/catch.hpp>

#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/plan/predict.hpp"

using namespace gridtrain;

namespace {

Config gpt(int layers, int width, int heads, int batch, int micro_batch) {
  Config c = parse_config("", "test", {});
  c.model.n_layer = layers;
  c.model.n_embd = width;
  c.model.n_head = heads;
  c.model.block_size = 2048;
  c.train.global_batch = batch;
  c.train.micro_batch = micro_batch;
  c.precision.type = PrecisionType::Bf16;
  return c;
}

}  // namespace

TEST_CASE("predict: each term follows its formula", "[np2][predict]") {
  Config c = gpt(8, 1024, 16, 64, 2);
  const DataShape data{51200};
  Machine m{"test", 1e14, 2e14, 0, 8, 0, {1e-5, 1e11}, {2e-5, 1e10}};
  const Prediction one = predict_step(c, data, {1, 1, 1, 0}, m, {});
  REQUIRE(one.infeasible.empty());
  CHECK(one.micro_batches == 32);
  CHECK(one.tp_s == 0);
  CHECK(one.pp_s == 0);
  CHECK(one.dp_s == 0);
  CHECK(one.step_s == Approx(one.compute_s));
  // 8 ranks as (dp 2, tp 2, pp 2): compute / 8, bubble (p − 1)/m of it, ring all-reduces.
  const Prediction p = predict_step(c, data, {2, 2, 2, 0}, m, {});
  REQUIRE(p.infeasible.empty());
  const double M = 64 / (2 * 2);
  CHECK(p.micro_batches == M);
  CHECK(p.compute_s == Approx(one.compute_s / 8));
  CHECK(p.bubble_s == Approx(p.compute_s * 1 / M));
  const double activation = 2.0 * 2048 * 1024 * 2;  // b·T·C bf16
  CHECK(p.tp_s == Approx(4 * 4 * M * (2 * 1e-5 + activation / 1e11)));  // 4 layers per stage, 4 per layer
  CHECK(p.pp_s == Approx(2 * M * (1e-5 + activation / 1e11)));           // stride 4 · 2 ranks fit the node
  CHECK(p.step_s == Approx(p.compute_s + p.bubble_s + p.tp_s + p.pp_s + p.dp_s));
  // Recomputation: the trainer's accountant's activations and FLOPs, two more all-reduces per
  // layer for full.
  for (auto r : {Recompute::Selective, Recompute::Full}) {
    CAPTURE(name_of(r));
    Config rc = c;
    rc.train.recompute = r;
    const Prediction q = predict_step(rc, data, {2, 2, 2, 0}, m, {});
    const auto plan = [&](const Config& k) { return plan_model(k, data, stage_layout({4, 4}, 0, 1, nullptr, 2)); };
    CHECK(q.memory_bytes - p.memory_bytes ==
          Approx(plan(rc)->activation_bytes(2, 2, 2) - plan(c)->activation_bytes(2, 2, 2)));
    CHECK(q.compute_s == Approx(p.compute_s * (1 + plan(rc)->recompute_flops_per_item() / plan(c)->flops_per_item())));
    CHECK(q.tp_s == Approx(p.tp_s * (r == Recompute::Full ? 1.5 : 1.0)));
  }
  // zb-h1: the bubble times 1 − 3w, w = 2N / (6N + 12·L·C·T) the weight gradients' share; ZeRO 3 refused.
  Config zb = c;
  zb.train.schedule = PipelineSchedule::ZbH1;
  const double per_item = plan_model(c, data, {})->flops_per_item(), attention = 12.0 * 8 * 1024 * 2048;
  const Prediction zp = predict_step(zb, data, {2, 2, 2, 0}, m, {});
  CHECK(zp.bubble_s == Approx(p.bubble_s * (1 - (per_item - attention) / per_item)));
  CHECK(zp.compute_s == Approx(p.compute_s));
  CHECK_THAT(predict_step(zb, data, {2, 2, 2, 3}, m, {}).infeasible, Catch::Contains("zb-h1 with optim.zero_stage = 3"));
  // ZeRO stage 3 moves 3/2 the bytes of stages 0-2 and shards the model state by dp.
  const Prediction z0 = predict_step(c, data, {2, 2, 2, 0}, m, {}), z3 = predict_step(c, data, {2, 2, 2, 3}, m, {});
  CHECK(z3.dp_s == Approx(1.5 * z0.dp_s));
  CHECK(z3.memory_bytes < z0.memory_bytes);
  // The link a group spans: tp 4 in nodes of 6 ranks straddles two of them.
  Machine six = m;
  six.ranks_per_node = 6;
  const Prediction straddle = predict_step(c, data, {1, 4, 1, 0}, six, {}), inside = predict_step(c, data, {1, 4, 1, 0}, m, {});
  CHECK(straddle.tp_s > 5 * inside.tp_s);  // InfiniBand's β is 10× below NVLink's here
  // A CPU node of 2 cores: 4 ranks each get half a core.
  m.cores_per_node = 2;
  CHECK(predict_step(c, data, {4, 1, 1, 0}, m, {}).compute_s == Approx(2 * one.compute_s / 4));
}

TEST_CASE("predict ranks feasible layouts by step time and says why others cannot run", "[np2][predict]") {
  Config c = gpt(4, 256, 4, 16, 2);
  const Machine m{"test", 1e13, 2e13, 1e12, 4, 0, {1e-5, 1e11}, {2e-5, 1e9}};
  const auto ps = rank_layouts(c, {1000}, 16, m, {});
  REQUIRE(!ps.empty());
  REQUIRE(ps.front().infeasible.empty());
  bool seen_infeasible = false;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& l = ps[i].layout;
    CAPTURE(l.dp, l.tp, l.pp, l.zero, ps[i].infeasible);
    CHECK(l.dp * l.tp * l.pp == 16);
    CHECK(l.tp <= 4);  // inside a node
    if (ps[i].infeasible.empty()) {
      CHECK(!seen_infeasible);  // the feasible ones first, by step time
      if (i > 0) CHECK(ps[i - 1].step_s <= ps[i].step_s);
      CHECK(16 % (2 * l.dp) == 0);
    } else {
      seen_infeasible = true;
    }
  }
  CHECK(seen_infeasible);  // dp = 16 cannot split a global batch of 16 into micro-batches of 2
  const Prediction big = predict_step(gpt(4, 256, 4, 16, 2), {1000}, {1, 3, 1, 0}, m, {});
  CHECK_THAT(big.infeasible, Catch::Contains("model.n_head = 4 is not divisible by grid.tp = 3"));
  c.optim.type = OptimizerType::OnebitAdam;  // what a run refuses, predict refuses
  CHECK_THAT(predict_step(c, {1000}, {8, 2, 1, 0}, m, {}).infeasible, Catch::Contains("onebit_adam"));
  c.optim.type = OptimizerType::AdamW;
  Machine small = m;
  small.memory_bytes = 1e6;
  CHECK(predict_step(c, {1000}, {8, 1, 2, 0}, small, {}).infeasible == "out of memory");
}

TEST_CASE("predict matches Megatron-LM's A100 throughput within 25 %", "[np2][predict]") {
  struct Row {
    int layers, width, heads, batch, dp, tp, pp;
    double tflops;  // Narayanan et al. 2021, Table 1: achieved teraFLOP/s per GPU
  };
  for (const Row& r : {Row{80, 12288, 96, 2304, 24, 8, 8, 148}, Row{128, 25600, 160, 3072, 6, 8, 64, 163},
                       Row{40, 6144, 48, 1024, 32, 8, 1, 135}}) {
    CAPTURE(r.layers, r.width);
    Config c = gpt(r.layers, r.width, r.heads, r.batch, 1);
    c.train.recompute = Recompute::Full;  // as the paper's runs
    const Prediction p = predict_step(c, {51200}, {r.dp, r.tp, r.pp, 0}, device_machine("a100", PrecisionType::Bf16, 0.5),
                                      {/*grad_bytes=*/2});
    CHECK(p.infeasible.empty());
    CHECK(p.tflops_per_rank == Approx(r.tflops).epsilon(0.25));
  }
}

TEST_CASE("predict: model state of a 7.5B model at dp = 64 is the ZeRO paper's 120 / 31.4 / 16.6 / 1.9 GB with 2-byte "
          "weights", "[np2][predict]") {
  // Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, N_d = 64, mixed-precision Adam (K = 12), stages 0-3.
  // A GPT of 36 layers of width 4096 with a 51200-token vocabulary has Ψ = 7.47B.
  Config c = gpt(36, 4096, 32, 512, 1);
  c.precision.weights = PrecisionType::Bf16;
  const DataShape data{51200};
  const Machine m{"test", 1e14, 2e14, 0, 8, 0, {1e-5, 1e11}, {2e-5, 1e10}};
  const double paper[4] = {120e9, 31.4e9, 16.6e9, 1.9e9};
  for (int zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    const Prediction p = predict_step(c, data, {64, 1, 1, zero}, m, {});
    REQUIRE(p.infeasible.empty());
    CHECK(std::abs(p.state_bytes / paper[zero] - 1) <= 0.02);
  }
  CHECK_THAT(state_accounting(c.optim.type, c.precision.weights),
             Catch::Contains("bf16 weights and gradients, fp32 master weights with the optimizer state: 2 + 2 + 12"));
  // fp32 weights (gridtrain's default) keep 4Ψ + 4Ψ replicated at stage 1: twice the paper's figure.
  c.precision.weights = PrecisionType::Fp32;
  const double psi = static_cast<double>(plan_model(c, data, {})->parameters());
  CHECK(predict_step(c, data, {64, 1, 1, 1}, m, {}).state_bytes == Approx(8 * psi + 8 * psi / 64));
}

TEST_CASE("predict: an MoE layout's ep all-to-all, experts' gradients over expert dp, experts split over tp",
          "[np2][predict]") {
  Config c = parse_config("", "test", {"--model.type=llama", "--model.n_layer=4", "--model.n_embd=1024",
                                       "--model.n_head=16", "--model.n_kv_head=4", "--model.block_size=2048",
                                       "--moe.experts=8", "--moe.top_k=2", "--moe.ffn_hidden=2048",
                                       "--train.global_batch=64", "--train.micro_batch=1", "--precision.type=bf16"});
  const DataShape data{32000};
  const Machine m{"test", 1e14, 2e14, 0, 8, 0, {1e-5, 1e11}, {2e-5, 1e10}};
  const double L = 4, E = 8, k = 2, C = 1024, F = 2048, T = 2048, per_expert = 3 * C * F;
  const double whole = static_cast<double>(plan_model(c, data, {})->parameters()), dense = whole - L * E * per_expert;
  auto ring = [](double bytes, int n, const Link& link) {
    return n == 1 ? 0.0 : 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * bytes / link.bytes_per_s;
  };
  const Prediction ep1 = predict_step(c, data, {8, 1, 1, 1, 1}, m, {});
  const Prediction ep4 = predict_step(c, data, {8, 1, 1, 1, 4}, m, {});
  REQUIRE(ep1.infeasible.empty());
  REQUIRE(ep4.infeasible.empty());
  CHECK(ep1.ep_s == 0);
  CHECK(ep4.compute_s == Approx(ep1.compute_s));
  const double M = 64 / 8, rows = 1 * T * k;  // micro-batches; routed rows of a micro-batch
  // Four all-to-alls per MoE layer and micro-batch, 3/4 of the rows leaving the rank, inside the node.
  CHECK(ep4.ep_s == Approx(4 * L * M * 3 * 1e-5 + 4 * L * M * rows * C * 2 * 3 / 4 / 1e11));
  CHECK(ep1.dp_s == Approx(ring(whole * 4, 8, m.intra)));
  CHECK(ep4.dp_s == Approx(ring(dense * 4, 8, m.intra) + ring(L * 2 * per_expert * 4, 2, m.intra)));
  CHECK(ep4.state_bytes < ep1.state_bytes);  // each rank's experts: 2 of 8
  CHECK(ep4.step_s == Approx(ep4.compute_s + ep4.bubble_s + ep4.tp_s + ep4.pp_s + ep4.ep_s + ep4.dp_s));
  // tp 2 splits the experts as the rest (expert tensor parallelism): the same FLOPs per rank, half
  // of each expert's gradient, reduced over the dp / ep = 2 ranks 4 apart (inside the node).
  const Prediction tp2 = predict_step(c, data, {4, 2, 1, 1, 2}, m, {});
  REQUIRE(tp2.infeasible.empty());
  CHECK(tp2.compute_s == Approx(ep4.compute_s));
  const double tp2_experts = L * 4 * per_expert / 2;  // E / ep experts per layer, half of each
  const double tp2_rank = static_cast<double>(plan_model(c, data, stage_layout({4}, 0, 1, nullptr, 2))->parameters());
  CHECK(tp2.dp_s == Approx(ring((tp2_rank - 2 * tp2_experts) * 4, 4, m.intra) + ring(tp2_experts * 4, 2, m.intra)));
}
