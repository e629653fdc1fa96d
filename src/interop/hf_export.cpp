// gridtrain export --format hf: a checkpoint's global tensors → a transformers model directory.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/checkpoint/tokenizer_record.hpp"
#include "gridtrain/data/hf_tokenizer.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/interop/hf.hpp"
#include "gridtrain/interop/safetensors.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/log.hpp"
#include "hf_names.hpp"
#include "hf_tokenizer.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

using json = nlohmann::json;

// The transformers class of an MoE llama: Mixtral where it can be (every layer MoE, no shared
// expert, the chosen probabilities renormalized), else Qwen2-MoE, which always has a shared
// expert. Throws gridtrain::Error for a model neither computes (another router, an expert bias,
// no shared expert where Mixtral's form does not hold).
bool as_mixtral(const Config& cfg) {
  const Config::Moe& e = cfg.moe;
  if (e.router != MoeRouter::Softmax || e.expert_bias_rate > 0)
    throw Error(std::string("moe.router = ") + name_of(e.router) + " with moe.expert_bias_rate = " +
                fmt("%g", e.expert_bias_rate) + ": MixtralForCausalLM and Qwen2MoeForCausalLM choose by the "
                "softmax's top-k alone; valid: moe.router = softmax with moe.expert_bias_rate = 0");
  const bool every_layer = e.list.empty() ? e.every == 1 : static_cast<int>(e.list.size()) == cfg.model.n_layer;
  if (every_layer && e.shared_ffn_hidden == 0 && e.norm_topk_prob) return true;
  if (e.shared_ffn_hidden == 0)
    throw Error("moe.shared_ffn_hidden = 0 with " + std::string(every_layer ? "moe.norm_topk_prob = false" :
                                                                          "dense layers (moe.layers)") +
                ": no transformers class computes it (MixtralForCausalLM has MoE in every layer and renormalizes "
                "the top-k; Qwen2MoeForCausalLM always has a shared expert); valid: a shared expert, or Mixtral's form");
  return false;
}

// The config.json of transformers' LlamaConfig / GPT2Config / MixtralConfig / Qwen2MoeConfig for
// cfg; the vocabulary and the llama's SwiGLU width and key/value heads as the checkpoint's
// tensors have them (the deck may leave them to the data, to the multiple_of rule and to
// n_kv_head = 0). mixtral: as_mixtral(cfg) for a mixture of experts.
json hf_config(const Config& cfg, CheckpointFile& file, bool mixtral) {
  const auto& m = cfg.model;
  if (m.type == ModelType::Gpt) {
    const auto vocab = file.shape_of("/model/wte.weight")[0];
    return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", vocab},
            {"n_positions", m.block_size}, {"n_embd", m.n_embd}, {"n_layer", m.n_layer}, {"n_head", m.n_head},
            {"n_inner", nullptr}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"initializer_range", 0.02},
            {"scale_attn_weights", true}, {"tie_word_embeddings", true}, {"use_cache", true}, {"dtype", "float32"}};
  }
  const auto vocab = file.shape_of("/model/model.embed_tokens.weight")[0];
  const auto kv = file.shape_of("/model/model.layers.0.self_attn.k_proj.weight")[0] / (m.n_embd / m.n_head);
  json config = {{"vocab_size", vocab}, {"hidden_size", m.n_embd}, {"num_hidden_layers", m.n_layer},
                 {"num_attention_heads", m.n_head}, {"num_key_value_heads", kv}, {"head_dim", m.n_embd / m.n_head},
                 {"hidden_act", "silu"}, {"max_position_embeddings", m.block_size}, {"rms_norm_eps", m.norm_eps},
                 {"rope_theta", m.rope_theta}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", m.rope_theta}}},
                 {"tie_word_embeddings", m.tie_embeddings}, {"initializer_range", 0.02}, {"use_cache", true},
                 {"dtype", "float32"}};
  const Config::Moe& e = cfg.moe;
  if (!e.enabled()) {
    config.update({{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                   {"intermediate_size", file.shape_of("/model/model.layers.0.mlp.gate_proj.weight")[0]},
                   {"rope_scaling", nullptr}, {"attention_bias", false}, {"mlp_bias", false}, {"pretraining_tp", 1}});
    return config;
  }
  int moe_layer = 0;  // the first, whose experts give their width
  while (!e.on(moe_layer)) ++moe_layer;
  const auto expert_width = file.shape_of("/model/model.layers." + std::to_string(moe_layer) + ".mlp.experts.0.gate_proj.weight")[0];
  config.update({{"num_experts_per_tok", e.top_k}, {"output_router_logits", false},
                 {"router_aux_loss_coef", e.aux_loss_coeff}, {"sliding_window", nullptr}, {"attention_dropout", 0.0}});
  if (mixtral) {
    config.update({{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"num_local_experts", e.experts},
                   {"intermediate_size", expert_width}, {"router_jitter_noise", 0.0}});
    return config;
  }
  std::vector<int> dense;  // Qwen2-MoE's mlp_only_layers
  for (int i = 0; i < m.n_layer; ++i)
    if (!e.on(i)) dense.push_back(i);
  const auto dense_width = dense.empty() ? expert_width
                                         : file.shape_of("/model/model.layers." + std::to_string(dense[0]) + ".mlp.gate_proj.weight")[0];
  config.update({{"architectures", {"Qwen2MoeForCausalLM"}}, {"model_type", "qwen2_moe"}, {"num_experts", e.experts},
                 {"moe_intermediate_size", expert_width}, {"shared_expert_intermediate_size", e.shared_ffn_hidden},
                 {"intermediate_size", dense_width}, {"norm_topk_prob", e.norm_topk_prob}, {"decoder_sparse_step", 1},
                 {"mlp_only_layers", dense}, {"qkv_bias", false}, {"use_sliding_window", false}});
  return config;
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error(path.string() + ": cannot write the file");
}

// The tensors under transformers' names and layouts (a Mixtral's on-disk names), in the checkpoint's order.
std::vector<SafeTensorOut> hf_tensors(CheckpointFile& file, ModelType type, bool mixtral) {
  std::vector<SafeTensorOut> out;
  for (const auto& dataset : file.datasets()) {
    if (!dataset.starts_with("/model/")) continue;
    const auto shape = file.shape_of(dataset);
    hf::WholeTensor t{dataset.substr(7), {shape.begin(), shape.end()}, {}};
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    t.data.resize(n);
    file.read(dataset, DType::F32, shape, Slab::all(shape), t.data.data(), false);
    if (hf::transposed(type, t.name)) t = hf::transpose(std::move(t));
    out.push_back({mixtral ? hf::to_mixtral(t.name) : hf::to_hf(type, t.name), std::move(t.shape), std::move(t.data)});
  }
  return out;
}

// model.safetensors, or shards of at most max_bytes each with their index.
std::string write_weights(const fs::path& dir, std::vector<SafeTensorOut> tensors, double max_bytes) {
  std::vector<std::vector<SafeTensorOut>> shards(1);
  double bytes = 0, total = 0;
  for (auto& t : tensors) {
    const double b = static_cast<double>(t.data.size() * sizeof(float));
    if (!shards.back().empty() && bytes + b > max_bytes) shards.emplace_back(), bytes = 0;
    bytes += b, total += b;
    shards.back().push_back(std::move(t));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors((dir / "model.safetensors").string(), shards[0], metadata);
    return "model.safetensors";
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    for (const auto& t : shards[i]) weight_map[t.name] = name;
    write_safetensors((dir / name).string(), shards[i], metadata);
  }
  write_json(dir / "model.safetensors.index.json",
             {{"metadata", {{"total_size", static_cast<std::uint64_t>(total)}}}, {"weight_map", weight_map}});
  return std::to_string(shards.size()) + " shards + model.safetensors.index.json";
}

// The tokenizer files, or (byte-level) the caveat: returns the files' contents by name, the
// line to report, and its bos and eos ids (null where it has none: transformers' config classes
// would otherwise default them, LlamaConfig to 1 and 2, and generate would stop at an ordinary
// token). Built before anything is written, so that a refused tokenizer leaves no export.
struct TokenizerFiles {
  std::vector<std::pair<std::string, std::string>> files;
  std::string report;
  json bos_id = nullptr, eos_id = nullptr;
};

json id_or_null(int id) { return id >= 0 ? json(id) : json(nullptr); }

TokenizerFiles tokenizer_files(const CheckpointFile& file, const Config& cfg) {
  const auto t = read_tokenizer_record(file);
  if (!t)
    return {{}, "note: the checkpoint carries no tokenizer (weights imported without one, or a run on a Megatron "
                "dataset, which records none, from no checkpoint.init_from that had one), so none is written: copy "
                "the tokenizer files of the model the data was prepared with\n"};
  if (t->name == "bytes")
    return {{}, "note: the model is byte-level (token i is byte i); no transformers tokenizer matches bytes exactly, "
                "so none is written: encode text as its UTF-8 bytes\n"};
  if (t->name == "hf") {  // a transformers model's own files, as prepare --tokenizer-json or import read them
    const auto bundle = hf_tokenizer_files(t->model);
    const auto eos = make_hf_tokenizer(t->model)->eod_id();  // read in C++: no Python starts
    return {{bundle.begin(), bundle.end()},
            "wrote the model's Hugging Face tokenizer back, as it was read: " + hf_tokenizer_names(t->model) + "\n",
            nullptr, id_or_null(eos)};
  }
  const std::string& model = t->model;
  const auto spec = sentencepiece_spec(model);  // read from the file itself: export needs no SentencePiece plugin
  return {{{"tokenizer.model", model},
           {"tokenizer.json", hf::tokenizer_json(spec)},
           {"tokenizer_config.json", hf::tokenizer_config(spec, cfg.model.block_size)}},
          "wrote tokenizer.json (the run's SentencePiece model, " + std::to_string(spec.pieces.size()) +
              " pieces, for the tokenizers library: the same ids as SentencePiece's Encode, no BOS/EOS), "
              "tokenizer.model and tokenizer_config.json\n",
          id_or_null(hf::special_id(spec, spec.bos_id)), id_or_null(hf::special_id(spec, spec.eos_id))};
}

}  // namespace

std::string export_hf(const HfExportOptions& o) {
  try {
    auto file = CheckpointFile::open(o.checkpoint, MPI_COMM_SELF);
    file.check_header();
    const Config cfg = parse_config(h5_read_attr_string(file.root(), "deck"), o.checkpoint + " (its deck)", {});
    const ModelType type = cfg.model.type;
    if (type != ModelType::Gpt && type != ModelType::Llama)
      throw Error(std::string("model.type = ") + name_of(type) + " has no transformers counterpart; valid: gpt, llama");
    const auto tokenizer = tokenizer_files(file, cfg);
    const bool mixtral = cfg.moe.enabled() && as_mixtral(cfg);  // before anything is written: it may refuse
    fs::create_directories(o.output);
    const fs::path dir(o.output);
    auto tensors = hf_tensors(file, type, mixtral);
    const std::size_t count = tensors.size();
    const std::string weights = write_weights(dir, std::move(tensors), o.max_shard_mb * 1e6);
    json config = hf_config(cfg, file, mixtral);
    config["bos_token_id"] = tokenizer.bos_id;
    config["eos_token_id"] = tokenizer.eos_id;
    write_json(dir / "config.json", config);
    write_json(dir / "generation_config.json",
               {{"do_sample", false}, {"max_length", cfg.model.block_size}, {"bos_token_id", tokenizer.bos_id},
                {"eos_token_id", tokenizer.eos_id}});
    for (const auto& [name, bytes] : tokenizer.files) {
      std::ofstream out(dir / name, std::ios::binary);
      out << bytes;
      if (!out) throw Error((dir / name).string() + ": cannot write the file");
    }
    file.close();
    return "Exported " + o.checkpoint + " (" + name_of(type) + ", " + std::to_string(count) + " tensors) to " +
           o.output + ": config.json, generation_config.json, " + weights + "\n" + tokenizer.report;
  } catch (const Error& e) {
    throw Error("export: " + std::string(e.what()));
  } catch (const std::exception& e) {
    throw Error("export: checkpoint '" + o.checkpoint + "': " + e.what());
  }
}

}  // namespace gridtrain
