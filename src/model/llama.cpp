#include "gridtrain/model/llama.hpp"

#include <cmath>
#include <stdexcept>

#include "gridtrain/model/language_model.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"
#include "gridtrain/precision/matmul.hpp"

namespace gridtrain {
namespace {

using lm::ends_with;

torch::nn::Linear bias_free(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// x (B, H, T, D) at positions [offset, offset + T), or at the slot's document positions (B, T),
// rotated: x·cos + rotate_half(x)·sin, rotate_half(x) = (−x[D/2:], x[:D/2]).
torch::Tensor rotate(const torch::Tensor& x, const Rope& rope, const lm::CacheSlot& slot) {
  const auto B = x.size(0), T = x.size(2), D = x.size(3), half = D / 2, offset = slot.offset();
  const auto& positions = slot.documents.positions;
  auto table = [&](const torch::Tensor& t) {  // (T, D), or per window (B, 1, T, D)
    if (!positions.defined()) return t.slice(0, offset, offset + T).to(x.scalar_type());
    return t.index_select(0, positions.reshape({-1})).view({B, 1, T, D}).to(x.scalar_type());
  };
  const auto cos = table(rope.cos), sin = table(rope.sin);
  auto rotated = torch::cat({-x.slice(3, half), x.slice(3, 0, half)}, 3);
  return x * cos + rotated * sin;
}

// The tables as transformers computes them (fp32 inverse frequencies θ^(−2j/D), then t·f).
Rope rope_tables(const LlamaShape& s) {
  const auto D = s.head_dim();
  auto inv_freq = 1.0 / torch::pow(s.rope_theta, torch::arange(0, D, 2, torch::kInt64).to(torch::kFloat) / D);
  auto freqs = torch::outer(torch::arange(s.block_size, torch::kInt64).to(torch::kFloat), inv_freq);  // (T, D/2)
  auto angles = torch::cat({freqs, freqs}, 1);                                                         // (T, D)
  return {angles.cos(), angles.sin()};
}

}  // namespace

RmsNorm::RmsNorm(std::int64_t c, double eps, const TpRegion& region) : eps_(eps), region_(region) {
  weight_ = register_parameter("weight", torch::ones({c}));
}

torch::Tensor RmsNorm::forward(const torch::Tensor& x) {
  const auto xf = x.to(torch::kFloat);
  return region_.replicated(weight_) * (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_)).to(x.scalar_type());
}

LlamaAttention::LlamaAttention(const LlamaShape& s, const TpRegion& region)
    : region_(region),
      n_head_(region.local(s.n_head)),
      n_kv_head_(region.local(s.n_kv_head)),
      head_dim_(s.head_dim()),
      fused_(s.fused_attention),
      recompute_(s.recompute) {
  q_proj_ = register_module("q_proj", bias_free(s.n_embd, n_head_ * head_dim_));
  k_proj_ = register_module("k_proj", bias_free(s.n_embd, n_kv_head_ * head_dim_));
  v_proj_ = register_module("v_proj", bias_free(s.n_embd, n_kv_head_ * head_dim_));
  o_proj_ = register_module("o_proj", bias_free(n_head_ * head_dim_, s.n_embd));
}

torch::Tensor LlamaAttention::forward(const torch::Tensor& x, const Rope& rope, const lm::CacheSlot& slot) {
  const auto qkv = region_.column(x, {q_proj_->weight, k_proj_->weight, v_proj_->weight});  // (B, T, ·/tp)
  const auto B = qkv[0].size(0), T = qkv[0].size(1);  // T: the whole sequence
  auto heads = [&](const torch::Tensor& t, std::int64_t h) { return t.view({B, T, h, head_dim_}).transpose(1, 2); };
  auto q = rotate(heads(qkv[0], n_head_), rope, slot);     // (B, H/tp, T, D)
  auto k = rotate(heads(qkv[1], n_kv_head_), rope, slot);  // (B, Hkv/tp, T, D)
  auto v = heads(qkv[2], n_kv_head_);
  const auto [keys, values] = lm::append_kv(slot, k, v);  // with a cache: the positions so far
  auto y = lm::attention_core(q, keys, values, fused_, recompute_, slot).transpose(1, 2).contiguous().view({B, T, n_head_ * head_dim_});
  return region_.row(dense(y, o_proj_->weight));  // row-parallel: partial sums over this rank's heads
}

LlamaMlp::LlamaMlp(std::int64_t n_embd, std::int64_t width, const TpRegion& region) : region_(region) {
  gate_proj_ = register_module("gate_proj", bias_free(n_embd, region.local(width)));
  up_proj_ = register_module("up_proj", bias_free(n_embd, region.local(width)));
  down_proj_ = register_module("down_proj", bias_free(region.local(width), n_embd));
}

torch::Tensor LlamaMlp::forward(const torch::Tensor& x) {
  const auto in = region_.column(x, {gate_proj_->weight, up_proj_->weight});  // 2 × (B, T, F/tp)
  return region_.row(dense(torch::silu(in[0]) * in[1], down_proj_->weight));
}

LlamaBlock::LlamaBlock(const LlamaShape& s, const TpRegion& region, const Rope& rope, std::int64_t layer,
                       moe::RouterLog* routers, const EpRegion& experts)
    : rope_(rope) {
  auto rms_norm = [&] { return std::make_shared<RmsNorm>(s.n_embd, s.norm_eps, region); };
  input_layernorm_ = register_module("input_layernorm", rms_norm());
  self_attn_ = register_module("self_attn", std::make_shared<LlamaAttention>(s, region));
  post_attention_layernorm_ = register_module("post_attention_layernorm", rms_norm());
  if (!s.moe.on(layer)) {
    mlp_ = register_module("mlp", std::make_shared<LlamaMlp>(s.n_embd, s.ffn_hidden, region));
    return;
  }
  const auto expert = [&](std::int64_t width) { return std::make_shared<LlamaMlp>(s.n_embd, width, TpRegion{}); };
  mlp_ = register_module("mlp", std::make_shared<moe::MoeMlp>(s.n_embd, s.moe, expert, routers, layer, experts, region));
}

torch::Tensor LlamaBlock::forward(const torch::Tensor& x, const lm::CacheSlot& slot) {
  auto y = x + self_attn_->forward(input_layernorm_->forward(x), rope_, slot);
  return y + mlp_->forward(post_attention_layernorm_->forward(y));
}

LlamaPlan::LlamaPlan(const LlamaShape& s, const ModelLayout& layout)
    : LanguageModelPlan(layout, s.n_layer, s.block_size, s.n_embd, s.vocab_size, s.recompute), s_(s) {}

std::vector<std::string> LlamaPlan::names() const {
  std::vector<std::string> out;
  if (first_stage() || (last_stage() && s_.tie_embeddings)) out.push_back("model.embed_tokens.weight");
  for (const auto& chunk : chunks())
    for (std::int64_t i = chunk.first; i < chunk.first + chunk.count; ++i) {
      const std::string layer = "model.layers." + std::to_string(i) + ".";
      for (const char* p : {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                            "self_attn.o_proj", "post_attention_layernorm"})
        out.push_back(layer + p + ".weight");
      if (s_.moe.on(i))
        for (const auto& p : s_.moe.mlp_names(ep_rank() * s_.moe.experts / ep_size(), s_.moe.experts / ep_size()))
          out.push_back(layer + "mlp." + p);
      else
        for (const char* p : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) out.push_back(layer + p + ".weight");
    }
  if (last_stage()) out.push_back("model.norm.weight");
  if (last_stage() && !s_.tie_embeddings) out.push_back("lm_head.weight");
  return out;
}

ShardSpec LlamaPlan::shard(const std::string& name) const {
  const std::int64_t C = s_.n_embd, Q = s_.n_head * s_.head_dim(), KV = s_.n_kv_head * s_.head_dim(), F = s_.ffn_hidden;
  auto local = [&](const std::string& suffix) { return name.starts_with("model.layers.") && ends_with(name, suffix); };
  if (name == "model.embed_tokens.weight") return {{s_.vocab_size, C}, 0, 1, first_stage()};
  if (name == "lm_head.weight") return {{s_.vocab_size, C}, 0};
  if (name == "model.norm.weight" || local("layernorm.weight")) return {{C}};
  if (local("self_attn.q_proj.weight")) return {{Q, C}, 0};
  if (local("self_attn.k_proj.weight") || local("self_attn.v_proj.weight")) return {{KV, C}, 0};
  if (local("self_attn.o_proj.weight")) return {{C, Q}, 1};
  if (local(".mlp.gate.weight")) return {{s_.moe.experts, C}};
  if (local(".mlp.gate.e_score_correction_bias")) return {{s_.moe.experts}};
  if (local("mlp.shared_expert_gate.weight")) return {{1, C}};
  for (const auto& [part, width] : {std::pair{".mlp.experts.", s_.moe.ffn_hidden}, {".mlp.shared_expert.", s_.moe.shared_ffn_hidden}})
    if (name.find(part) != std::string::npos) {  // split over tp as the dense MLP (expert tensor parallelism)
      ShardSpec spec{{C, width}, 1};
      if (ends_with(name, "gate_proj.weight") || ends_with(name, "up_proj.weight")) spec = {{width, C}, 0};
      else if (!ends_with(name, "down_proj.weight")) break;
      spec.expert = part == std::string(".mlp.experts.");  // the shared expert is dense
      return spec;
    }
  if (local("mlp.gate_proj.weight") || local("mlp.up_proj.weight")) return {{F, C}, 0};
  if (local("mlp.down_proj.weight")) return {{C, F}, 1};
  throw std::invalid_argument("Llama has no parameter " + name);
}

double LlamaPlan::flops_per_item() const {
  const double C = s_.n_embd, L = s_.n_layer, Q = s_.n_head * s_.head_dim(), KV = s_.n_kv_head * s_.head_dim();
  const double M = static_cast<double>(s_.moe.layers.size());  // MoE layers: their active parameters count
  const double n = s_.vocab_size * C + L * (C * (2.0 * Q + 2.0 * KV) + 2.0 * C) + (L - M) * 3.0 * C * s_.ffn_hidden +
                   M * s_.moe.active_mlp_params(s_.n_embd) + C;
  return 6.0 * n + 12.0 * L * C * s_.block_size;
}

LlamaPlan::LayerActivations LlamaPlan::layer_activations(int micro_batch, int elem_bytes) const {
  const double b = micro_batch, T = tokens(), C = s_.n_embd, H = s_.n_head, t = tp_size();
  const double scores = 2.0 * H * score_keys(s_.fused_attention) / C;  // the softmax output (B, H/t, T, keys)
  const double sdpa_output = s_.fused_attention ? 2.0 : 0.0;  // kept by sdpa's backward beside o_proj's copy
  // The MLP's four width-sized tensors per token, averaged over the layers: k experts' and the
  // shared one's in an MoE layer (each token's rows, gathered), plus its (N, E) router scores.
  const double L = s_.n_layer, M = static_cast<double>(s_.moe.layers.size());
  const double moe_mlp = 8.0 * (s_.moe.top_k * s_.moe.ffn_hidden + s_.moe.shared_ffn_hidden) / C + 4.0 * s_.moe.experts / C;
  const double mlp = ((L - M) * 8.0 * s_.ffn_hidden / C + M * moe_mlp) / L;
  const double split_part = 4.0 + sdpa_output + 4.0 * s_.n_kv_head / H + mlp;
  // The 12 b T C bytes (at 2 bytes) of norms and layer inputs outside the split: split by sequence parallelism.
  return {b * T * C * scores / t * elem_bytes / 2.0,
          b * T * C * (12.0 / sequence_split() + split_part / t) * elem_bytes / 2.0 +
              gathered_kv_bytes(micro_batch, elem_bytes),
          ring_tile_bytes(micro_batch, H)};
}

Llama::Llama(const LlamaShape& s, const ModelLayout& layout) : LanguageModel(kBlocks, s.documents), plan_(s, layout) {
  routers_ = moe::RouterLog(s.moe);
  auto tables = rope_tables(s);  // buffers, so that module->to(device) moves them
  rope_ = {register_buffer("rope_cos", tables.cos), register_buffer("rope_sin", tables.sin)};
  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  if (first_stage() || (last_stage() && s.tie_embeddings)) {
    const auto rows = local_shape(shard("model.embed_tokens.weight"), plan_.tp_size())[0];
    embed_tokens_ = model->register_module("embed_tokens", torch::nn::Embedding(rows, s.n_embd));
  }
  // Named by global layer index (no dots allowed in module names, so layers is a plain module).
  add_blocks(*model->register_module("layers", std::make_shared<torch::nn::Module>()),
             [&](std::int64_t i) { return std::make_shared<LlamaBlock>(s, plan_.region(), rope_, i, &routers_, plan_.experts()); });
  if (!last_stage()) return;
  norm_ = model->register_module("norm", std::make_shared<RmsNorm>(s.n_embd, s.norm_eps, plan_.region()));
  if (!s.tie_embeddings) {
    const auto rows = local_shape(shard("lm_head.weight"), plan_.tp_size())[0];
    lm_head_ = register_module("lm_head", bias_free(s.n_embd, rows));
  }
}

TensorClass Llama::tensor_class(const std::string& name) const {
  if (name == "model.embed_tokens.weight") return TensorClass::Embedding;
  return name == "lm_head.weight" ? TensorClass::Head : Model::tensor_class(name);
}

std::string Llama::describe() const {
  const auto& s = shape();
  return std::string("llama, attention ") + (s.fused_attention ? "sdpa" : "math") + ", " + std::to_string(s.n_head) +
         " query / " + std::to_string(s.n_kv_head) + " key-value heads, SwiGLU width " + std::to_string(s.ffn_hidden) +
         (s.tie_embeddings ? ", tied embeddings" : ", untied embeddings") +
         (s.moe.experts > 0 ? ", " + std::to_string(s.moe.layers.size()) + " MoE layers of " + std::to_string(s.moe.experts) +
                                  " experts (" + name_of(s.moe.router) + " top-" + std::to_string(s.moe.top_k) + ", width " +
                                  std::to_string(s.moe.ffn_hidden) + ")"
                            : "");
}

int Llama::unit_of(const std::string& name) const {
  if (name == "model.embed_tokens.weight") return kEmbed;
  if (name == "model.norm.weight" || name == "lm_head.weight") return head_unit();
  if (name.starts_with("model.layers.")) return block_unit(std::stoi(name.substr(13)));
  throw std::invalid_argument("Llama has no parameter " + name);
}

torch::Tensor Llama::embed(const torch::Tensor& idx, std::int64_t, const torch::Tensor&) {
  gather(kEmbed);
  // One stage with a tied head: the head uses the embedding again, so it stays gathered.
  return release(kEmbed, lm::embed(idx, embed_tokens_->weight, plan_.region()),
                 /*keep=*/last_stage() && tied());  // (B, T, C)
}

void Llama::fill(const std::string& name, torch::Tensor& full, at::Generator& gen) const {
  if (ends_with(name, "norm.weight")) {
    full.fill_(1.0);
  } else {
    const bool residual = ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight");
    full.normal_(0.0, residual ? residual_std() : 0.02, gen);
  }
}

}  // namespace gridtrain
