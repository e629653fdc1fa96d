#include "gridtrain/model/gpt.hpp"

#include <cmath>
#include <stdexcept>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/gelu.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"
#include "gridtrain/precision/matmul.hpp"

namespace gridtrain {
namespace {

torch::nn::LayerNorm layer_norm(std::int64_t c) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})); }

// ln(x), its weight and bias as the region uses replicated parameters (with sequence parallelism,
// x is this rank's slice and their gradients are summed over tp).
torch::Tensor norm(torch::nn::LayerNorm& ln, const torch::Tensor& x, const TpRegion& region) {
  if (!region.sp()) return ln->forward(x);
  const auto& o = ln->options;
  return torch::layer_norm(x, o.normalized_shape(), region.replicated(ln->weight), region.replicated(ln->bias), o.eps());
}

using lm::ends_with;

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GptShape& s, const TpRegion& region)
    : region_(region), n_head_(region.local(s.n_head)), fused_(s.fused_attention), recompute_(s.recompute) {
  c_attn_ = register_module("c_attn", torch::nn::Linear(s.n_embd, 3 * region.local(s.n_embd)));
  c_proj_ = register_module("c_proj", torch::nn::Linear(region.local(s.n_embd), s.n_embd));
}

namespace {

// The row-parallel output projection: partial sums over this rank's input features, reduced
// (with sequence parallelism reduce-scattered), then the bias once.
torch::Tensor row_parallel(torch::nn::Linear& proj, const torch::Tensor& y, const TpRegion& region) {
  if (!region.tp) return dense(y, proj->weight, proj->bias);
  return region.row(dense(y, proj->weight)) + region.replicated(proj->bias);
}

}  // namespace

torch::Tensor CausalSelfAttention::forward(const torch::Tensor& x, const lm::CacheSlot& slot) {
  const auto C = c_attn_->weight.size(0) / 3, D = C / n_head_;  // C: local width
  auto qkv = region_.column(x, {c_attn_->weight}, {c_attn_->bias})[0].split(C, 2);  // 3 × (B, T, C/tp)
  const auto B = qkv[0].size(0), T = qkv[0].size(1);  // T: the whole sequence
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, D}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);  // (B, H/tp, T, D)
  const auto [keys, values] = lm::append_kv(slot, k, v);  // with a cache: the positions so far
  auto y = lm::attention_core(q, keys, values, fused_, recompute_, slot).transpose(1, 2).contiguous().view({B, T, C});  // (B, T, C/tp)
  return row_parallel(c_proj_, y, region_);
}

Mlp::Mlp(const GptShape& s, const TpRegion& region) : region_(region) {
  c_fc_ = register_module("c_fc", torch::nn::Linear(s.n_embd, region.local(4 * s.n_embd)));
  c_proj_ = register_module("c_proj", torch::nn::Linear(region.local(4 * s.n_embd), s.n_embd));
}

torch::Tensor Mlp::forward(const torch::Tensor& x) {
  auto h = gelu_tanh(region_.column(x, {c_fc_->weight}, {c_fc_->bias})[0]);  // (B, T, 4C/tp)
  return row_parallel(c_proj_, h, region_);
}

Block::Block(const GptShape& s, const TpRegion& region) : region_(region) {
  ln_1_ = register_module("ln_1", layer_norm(s.n_embd));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(s, region));
  ln_2_ = register_module("ln_2", layer_norm(s.n_embd));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(s, region));
}

torch::Tensor Block::forward(const torch::Tensor& x, const lm::CacheSlot& slot) {
  auto y = x + attn_->forward(norm(ln_1_, x, region_), slot);
  return y + mlp_->forward(norm(ln_2_, y, region_));
}

GptPlan::GptPlan(const GptShape& s, const ModelLayout& layout)
    : LanguageModelPlan(layout, s.n_layer, s.block_size, s.n_embd, s.vocab_size, s.recompute), s_(s) {}

std::vector<std::string> GptPlan::names() const {
  std::vector<std::string> out;
  if (first_stage() || last_stage()) out.push_back("wte.weight");  // the last stage's: the tied head
  if (first_stage()) out.push_back("wpe.weight");
  for (const auto& chunk : chunks())
    for (std::int64_t i = chunk.first; i < chunk.first + chunk.count; ++i)
      for (const char* p : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"})
        for (const char* w : {".weight", ".bias"}) out.push_back("h." + std::to_string(i) + "." + p + w);
  if (last_stage()) out.insert(out.end(), {"ln_f.weight", "ln_f.bias"});
  return out;
}

Gpt::Gpt(const GptShape& s, const ModelLayout& layout) : LanguageModel(kBlocks, s.documents), plan_(s, layout) {
  if (first_stage() || last_stage()) {  // the tied head on the last stage is a copy of wte
    const auto rows = local_shape(shard("wte.weight"), plan_.tp_size())[0];
    wte_ = register_module("wte", torch::nn::Embedding(rows, s.n_embd));
  }
  if (first_stage()) wpe_ = register_module("wpe", torch::nn::Embedding(s.block_size, s.n_embd));
  // Named by global layer index (no dots allowed in module names, so h is a plain module).
  add_blocks(*register_module("h", std::make_shared<torch::nn::Module>()),
             [&](std::int64_t) { return std::make_shared<Block>(s, plan_.region()); });
  if (last_stage()) ln_f_ = register_module("ln_f", layer_norm(s.n_embd));
}

ShardSpec GptPlan::shard(const std::string& name) const {
  const std::int64_t C = s_.n_embd;
  auto local = [&](const std::string& suffix) { return ends_with(name, suffix); };
  if (name == "wte.weight") return {{s_.vocab_size, C}, 0, 1, first_stage()};
  if (local("attn.c_attn.weight")) return {{3 * C, C}, 0, 3};
  if (local("attn.c_attn.bias")) return {{3 * C}, 0, 3};
  if (local("attn.c_proj.weight")) return {{C, C}, 1};
  if (local("mlp.c_fc.weight")) return {{4 * C, C}, 0};
  if (local("mlp.c_fc.bias")) return {{4 * C}, 0};
  if (local("mlp.c_proj.weight")) return {{C, 4 * C}, 1};
  // Replicated: wpe, the LayerNorms, the row-parallel biases.
  if (name == "wpe.weight") return {{s_.block_size, C}};
  if (name.starts_with("ln_f.") || local(".ln_1.weight") || local(".ln_1.bias") || local(".ln_2.weight") ||
      local(".ln_2.bias") || local("c_proj.bias"))
    return {{C}};
  throw std::invalid_argument("Gpt has no parameter " + name);
}

TensorClass Gpt::tensor_class(const std::string& name) const {
  return name == "wte.weight" || name == "wpe.weight" ? TensorClass::Embedding : Model::tensor_class(name);
}

std::string Gpt::describe() const {
  return std::string("gpt, attention ") + (shape().fused_attention ? "sdpa" : "math");
}

int Gpt::unit_of(const std::string& name) const {
  if (name == "wte.weight") return kWte;
  if (name == "wpe.weight") return kWpe;
  if (name.starts_with("ln_f.")) return head_unit();
  if (name.starts_with("h.")) return block_unit(std::stoi(name.substr(2)));
  throw std::invalid_argument("Gpt has no parameter " + name);
}

torch::Tensor Gpt::embed(const torch::Tensor& idx, std::int64_t offset, const torch::Tensor& positions) {
  const auto region = plan_.region();
  const auto pos = positions.defined() ? region.local_tokens(positions)  // (B, T), or with SP (B, T/t)
                                       : region.positions(idx.size(0), idx.size(1), offset, idx.options());  // (T,), or with SP (B, T/t)
  gather(kWte);
  gather(kWpe);
  auto x = release(kWpe, lm::embed(idx, wte_->weight, region) + torch::embedding(region.replicated(wpe_->weight), pos));  // (B, T, C); SP (B, T/t, C)
  return release(kWte, x, /*keep=*/last_stage());       // one stage: the tied head uses wte again
}

torch::Tensor Gpt::final_norm(const torch::Tensor& x) { return norm(ln_f_, x, plan_.region()); }

GptPlan::LayerActivations GptPlan::layer_activations(int micro_batch, int elem_bytes) const {
  const double b = micro_batch, T = tokens(), C = s_.n_embd, H = s_.n_head, t = tp_size();
  // Korthikanti et al. 2022, Table 2 over this rank's T tokens: 34 s b h bytes at 2-byte
  // activations, 24 of them split by tp and the other 10 by sequence parallelism; of the 5 a s² b
  // of the attention scores, without dropout (no mask, no dropped copy) the softmax output's
  // 2 a s b keys, which fused attention and the ring never store.
  const double scores = 2.0 * H * score_keys(s_.fused_attention) / (C * t);
  return {b * T * C * scores * elem_bytes / 2.0, b * T * C * (10.0 / sequence_split() + 24.0 / t) * elem_bytes / 2.0 +
                                                     gathered_kv_bytes(micro_batch, elem_bytes),
          ring_tile_bytes(micro_batch, H)};
}

double GptPlan::flops_per_item() const {
  const double C = s_.n_embd, L = s_.n_layer;
  const double n = s_.vocab_size * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;  // all parameters but wpe
  return 6.0 * n + 12.0 * L * C * s_.block_size;
}

void Gpt::fill(const std::string& name, torch::Tensor& full, at::Generator& gen) const {
  if (ends_with(name, ".bias")) {
    full.zero_();
  } else if (name.starts_with("ln_") || name.find(".ln_") != std::string::npos) {
    full.fill_(1.0);
  } else {
    full.normal_(0.0, ends_with(name, "c_proj.weight") ? residual_std() : 0.02, gen);
  }
}

}  // namespace gridtrain
