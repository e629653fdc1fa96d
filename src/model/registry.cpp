// model.type -> its module, its plan, its pipeline layers and the layouts it refuses. Register
// new models here.
#include "gridtrain/model/registry.hpp"

#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/cnn.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/model/llama.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

bool fused_attention(const Config& c) { return c.model.attention != Attention::Math; }

namespace {

struct Entry {
  std::shared_ptr<Model> (*build)(const Config&, const DataShape&, const ModelLayout&);
  std::unique_ptr<ModelPlan> (*plan)(const Config&, const DataShape&, const ModelLayout&);
  int (*layers)(const Config&);
  std::vector<std::string> (*layout_problems)(const Config&, int tp, int pp);
  bool language_model;
  std::vector<std::string> function_keys;  // beyond model.type: the keys that change what the weights compute
};

std::vector<std::string> gpt_layout_problems(const Config& c, int tp, int) {
  if (c.model.n_head % tp == 0) return {};
  return {"model.n_head = " + std::to_string(c.model.n_head) + " is not divisible by grid.tp = " + std::to_string(tp) +
          "; tensor parallelism splits the attention heads"};
}

std::int64_t kv_heads(const Config& c) { return c.model.n_kv_head > 0 ? c.model.n_kv_head : c.model.n_head; }

// Llama's SwiGLU width rule (Touvron et al. 2023; Meta's reference model.py): two thirds of 4C,
// rounded up to a multiple of multiple_of; or model.ffn_hidden as given.
std::int64_t ffn_hidden(const Config& c) {
  if (c.model.ffn_hidden > 0) return c.model.ffn_hidden;
  const std::int64_t m = c.model.multiple_of, f = 8 * static_cast<std::int64_t>(c.model.n_embd) / 3;
  return m * ((f + m - 1) / m);
}

std::vector<std::string> llama_layout_problems(const Config& c, int tp, int pp) {
  auto problems = gpt_layout_problems(c, tp, pp);
  const auto t = std::to_string(tp);
  if (kv_heads(c) % tp != 0)
    problems.push_back("model.n_kv_head = " + std::to_string(kv_heads(c)) + " is not divisible by grid.tp = " + t +
                       "; tensor parallelism splits the key/value heads (valid: grid.tp dividing n_kv_head)");
  if (c.moe.enabled() && tp > 1 && c.grid.sequence_parallel)
    // The MoE layer routes whole micro-batches on every tp rank and splits the experts' width
    // (moe.hpp); with sequence parallelism each rank holds only its part of the sequence there.
    problems.push_back("moe.experts = " + std::to_string(c.moe.experts) + " with grid.tp = " + t +
                       " and grid.sequence_parallel = true: the MoE layers route every token of the micro-batch on "
                       "each tp rank (the balancing losses need them all), which sequence parallelism splits; "
                       "valid: grid.sequence_parallel = false, or grid.tp = 1");
  // Expert tensor parallelism splits the experts' widths (an unset moe.ffn_hidden is the SwiGLU
  // width, checked below).
  for (const auto& [key, width] : {std::pair{"moe.ffn_hidden", c.moe.ffn_hidden}, {"moe.shared_ffn_hidden", c.moe.shared_ffn_hidden}})
    if (c.moe.enabled() && width % tp != 0)
      problems.push_back(std::string(key) + " = " + std::to_string(width) + " is not divisible by grid.tp = " + t +
                         "; expert tensor parallelism splits it (valid: grid.tp dividing it)");
  if (ffn_hidden(c) % tp != 0)
    problems.push_back("the SwiGLU width " + std::to_string(ffn_hidden(c)) + " (model.ffn_hidden) is not divisible by "
                       "grid.tp = " + t + "; tensor parallelism splits it");
  return problems;
}

std::vector<std::string> cnn_layout_problems(const Config&, int tp, int pp) {
  if (tp == 1 && pp == 1) return {};
  return {"model.type = cnn is data parallel only, but grid.tp = " + std::to_string(tp) + " and grid.pp = " +
          std::to_string(pp) + "; valid: grid.tp = grid.pp = 1 (scale it with dp and optim.zero_stage)"};
}

lm::DocumentRules document_rules(const Config& c, const DataShape& d) {
  return {d.eod_token, c.data.reset_position_ids, c.data.document_mask, c.data.eod_mask_loss};
}

GptShape gpt_shape(const Config& c, const DataShape& d) {
  return {d.vocab_size,   c.model.block_size, c.model.n_layer,   c.model.n_head,
          c.model.n_embd, fused_attention(c), c.train.recompute, document_rules(c, d)};
}

moe::MoeShape moe_shape(const Config& c) {
  const Config::Moe& m = c.moe;
  moe::MoeShape s{m.experts, m.top_k, m.ffn_hidden > 0 ? m.ffn_hidden : ffn_hidden(c), m.shared_ffn_hidden,
                  m.norm_topk_prob, m.router, m.expert_bias_rate, m.aux_loss_coeff, m.z_loss_coeff, {},
                  m.capacity_factor};
  for (int i = 0; i < c.model.n_layer; ++i)
    if (m.on(i)) s.layers.push_back(i);
  return s;
}

LlamaShape llama_shape(const Config& c, const DataShape& d) {
  const auto& m = c.model;
  return {d.vocab_size,   m.block_size, m.n_layer,   m.n_head,         kv_heads(c),
          m.n_embd,       ffn_hidden(c), m.norm_eps, m.rope_theta, m.tie_embeddings, fused_attention(c),
          c.train.recompute, document_rules(c, d), moe_shape(c)};
}

CnnShape cnn_shape(const Config& c, const DataShape& d) { return {d.channels, d.height, d.width, d.classes, c.model.channels}; }

const Entry& entry(const Config& cfg) {
  static const std::map<ModelType, Entry> registry = {
      {ModelType::Gpt,
       {[](const Config& c, const DataShape& d, const ModelLayout& l) -> std::shared_ptr<Model> {
          return std::make_shared<Gpt>(gpt_shape(c, d), l);
        },
        [](const Config& c, const DataShape& d, const ModelLayout& l) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<GptPlan>(gpt_shape(c, d), l);
        },
        [](const Config& c) { return c.model.n_layer; }, gpt_layout_problems, true,
        {"model.n_layer", "model.n_head", "model.n_embd", "model.block_size"}}},
      {ModelType::Cnn,
       {[](const Config& c, const DataShape& d, const ModelLayout&) -> std::shared_ptr<Model> {
          return std::make_shared<Cnn>(cnn_shape(c, d));
        },
        [](const Config& c, const DataShape& d, const ModelLayout&) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<CnnPlan>(cnn_shape(c, d));
        },
        [](const Config&) { return 1; }, cnn_layout_problems, false, {"model.channels"}}},
      {ModelType::Llama,
       {[](const Config& c, const DataShape& d, const ModelLayout& l) -> std::shared_ptr<Model> {
          return std::make_shared<Llama>(llama_shape(c, d), l);
        },
        [](const Config& c, const DataShape& d, const ModelLayout& l) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<LlamaPlan>(llama_shape(c, d), l);
        },
        [](const Config& c) { return c.model.n_layer; }, llama_layout_problems, true,
        // Not model.block_size: rotary positions carry to any context length.
        {"model.n_layer", "model.n_head", "model.n_embd", "model.n_kv_head", "model.ffn_hidden", "model.norm_eps",
         "model.rope_theta", "model.tie_embeddings", "moe.experts", "moe.top_k", "moe.layers", "moe.ffn_hidden",
         "moe.shared_ffn_hidden", "moe.norm_topk_prob"}}},
  };
  return registry.at(cfg.model.type);  // every ModelType is registered
}

}  // namespace

std::int64_t expert_width(const Config& c) { return moe_shape(c).ffn_hidden; }

std::shared_ptr<Model> make_model(const Config& c, const DataShape& data) { return make_model(c, data, {}); }

std::shared_ptr<Model> make_model(const Config& c, const DataShape& data, const ModelLayout& layout) {
  return entry(c).build(c, data, layout);
}

std::unique_ptr<ModelPlan> plan_model(const Config& c, const DataShape& data, const ModelLayout& layout) {
  return entry(c).plan(c, data, layout);
}

int model_layers(const Config& c) { return entry(c).layers(c); }

bool language_model(const Config& c) { return entry(c).language_model; }

std::vector<std::string> model_layout_problems(const Config& c, int tp, int pp) {
  return entry(c).layout_problems(c, tp, pp);
}

std::vector<std::pair<std::string, std::string>> model_function(const Config& c) {
  std::vector<std::pair<std::string, std::string>> keys = {{"model.type", name_of(c.model.type)}};
  for (const auto& key : entry(c).function_keys) {
    std::string value = show_key(c, key);  // the value in effect where 0 means a rule
    if (key == "model.n_kv_head") value = std::to_string(kv_heads(c));
    if (key == "model.ffn_hidden") value = std::to_string(ffn_hidden(c));
    keys.emplace_back(key, value);
  }
  return keys;
}

}  // namespace gridtrain
