// gridtrain import: a transformers model directory → a weights-only gridtrain checkpoint.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/checkpoint/tokenizer_record.hpp"
#include "gridtrain/data/hf_tokenizer.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/interop/hf.hpp"
#include "gridtrain/interop/safetensors.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/version.hpp"
#include "hf_names.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

using json = nlohmann::json;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot read the file");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path.string() + ": not JSON: " + e.what());
  }
}

// Reads config.json's keys, refusing by name what gridtrain does not compute.
class HfConfig {
 public:
  explicit HfConfig(const fs::path& path) : path_(path.string()), j_(read_json(path)) {}
  template <class T>
  T get(const std::string& key) const {
    if (!j_.contains(key)) throw Error(path_ + ": key '" + key + "' is missing");
    try {
      return j_.at(key).get<T>();
    } catch (const json::exception&) {
      throw Error(path_ + ": key '" + key + "' = " + j_.at(key).dump() + " has the wrong type");
    }
  }
  template <class T>
  T get(const std::string& key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& raw() const { return j_; }
  /// Throws unless key is absent, null or `want`.
  void require(const std::string& key, const json& want, const std::string& why) const {
    if (has(key) && j_.at(key) != want)
      throw Error(path_ + ": " + key + " = " + j_.at(key).dump() + " is not supported (" + why + "); valid: " +
                  want.dump());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json j_;
};

// What a config class assumes for a key config.json leaves out (LlamaConfig's, MixtralConfig's, ...).
struct LlamaDefaults {
  int block_size;
  double norm_eps, rope_theta;
};
constexpr LlamaDefaults kLlama{2048, 1e-6, 10000.0}, kMixtral{4096 * 32, 1e-5, 1e6}, kQwen2Moe{32768, 1e-6, 10000.0};

void llama_model(const HfConfig& hc, Config::Model& m, const LlamaDefaults& d) {
  m.type = ModelType::Llama;
  m.n_embd = hc.get<int>("hidden_size");
  m.n_layer = hc.get<int>("num_hidden_layers");
  m.n_head = hc.get<int>("num_attention_heads");
  m.n_kv_head = hc.get<int>("num_key_value_heads", m.n_head);
  m.ffn_hidden = hc.get<int>("intermediate_size");
  m.block_size = hc.get<int>("max_position_embeddings", d.block_size);
  m.norm_eps = hc.get<double>("rms_norm_eps", d.norm_eps);
  m.tie_embeddings = hc.get<bool>("tie_word_embeddings", false);
  m.rope_theta = hc.get<double>("rope_theta", d.rope_theta);
  if (hc.has("rope_parameters")) {  // transformers 5's form
    const json& rope = hc.raw().at("rope_parameters");
    if (rope.value("rope_type", "default") != "default")
      throw Error(hc.path() + ": rope_parameters.rope_type = " + rope.at("rope_type").dump() +
                  " is not supported (gridtrain computes unscaled rotary embeddings); valid: \"default\"");
    m.rope_theta = rope.value("rope_theta", m.rope_theta);
  }
  hc.require("rope_scaling", nullptr, "gridtrain computes unscaled rotary embeddings");
  hc.require("hidden_act", "silu", "the SwiGLU MLP uses SiLU");
  hc.require("attention_bias", false, "gridtrain's llama has no biases");
  hc.require("mlp_bias", false, "gridtrain's llama has no biases");
  if (hc.get<bool>("use_sliding_window", true))  // Qwen2's configs carry a window this key switches off
    hc.require("sliding_window", nullptr, "attention is full causal");
  for (const json& type : hc.get<std::vector<json>>("layer_types", {}))
    if (type != "full_attention")
      throw Error(hc.path() + ": layer_types holds " + type.dump() +
                  ", which is not supported (attention is full causal); valid: \"full_attention\"");
  hc.require("pretraining_tp", 1, "sliced projections");
  hc.require("head_dim", m.n_embd / m.n_head, "gridtrain's head width is hidden_size / num_attention_heads");
}

// MixtralConfig: every layer a mixture of intermediate_size-wide experts, the top-k renormalized.
void mixtral_moe(const HfConfig& hc, Config& c) {
  c.moe.experts = hc.get<int>("num_local_experts", 8);
  c.moe.top_k = hc.get<int>("num_experts_per_tok", 2);
  c.moe.ffn_hidden = c.model.ffn_hidden;
  c.moe.aux_loss_coeff = hc.get<double>("router_aux_loss_coef", 0.001);
  hc.require("router_jitter_noise", 0.0, "the router's logits are computed without noise");
}

// Qwen2MoeConfig: a shared expert with its sigmoid gate; layer i is MoE unless it is in
// mlp_only_layers, where (i + 1) % decoder_sparse_step == 0 (Qwen2MoeDecoderLayer's rule).
void qwen2_moe(const HfConfig& hc, Config& c) {
  if (hc.get<bool>("qkv_bias", true))  // Qwen2MoeConfig's default: true
    throw Error(hc.path() + ": qkv_bias = true is not supported (gridtrain's llama has no biases); valid: false");
  const int step = hc.get<int>("decoder_sparse_step", 1);
  const auto dense = hc.get<std::vector<int>>("mlp_only_layers", {});
  if (step < 1) throw Error(hc.path() + ": decoder_sparse_step = " + std::to_string(step) + "; valid: >= 1");
  std::vector<int> moe_layers;
  for (int i = 0; i < c.model.n_layer; ++i)
    if ((i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end()) moe_layers.push_back(i);
  c.moe.experts = hc.get<int>("num_experts", 60);
  if (c.moe.experts == 0 || moe_layers.empty()) {  // no layer is a mixture: a dense llama
    c.moe = {};
    return;
  }
  c.moe.every = step;
  if (!dense.empty()) c.moe.list = moe_layers;
  c.moe.top_k = hc.get<int>("num_experts_per_tok", 4);
  c.moe.ffn_hidden = hc.get<int>("moe_intermediate_size", 1408);
  c.moe.shared_ffn_hidden = hc.get<int>("shared_expert_intermediate_size", 5632);
  c.moe.norm_topk_prob = hc.get<bool>("norm_topk_prob", false);
  c.moe.aux_loss_coeff = hc.get<double>("router_aux_loss_coef", 0.001);
}

void gpt2_model(const HfConfig& hc, Config::Model& m) {
  m.type = ModelType::Gpt;
  m.n_embd = hc.get<int>("n_embd");
  m.n_layer = hc.get<int>("n_layer");
  m.n_head = hc.get<int>("n_head");
  m.block_size = hc.get<int>("n_positions");
  hc.require("n_inner", 4 * m.n_embd, "the MLP width is 4 n_embd");
  const std::string act = hc.get<std::string>("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw Error(hc.path() + ": activation_function = \"" + act + "\" is not supported (gridtrain's GELU is the tanh "
                "approximation); valid: \"gelu_new\", \"gelu_pytorch_tanh\"");
  hc.require("layer_norm_epsilon", 1e-5, "LayerNorm epsilon is 1e-5");
  hc.require("scale_attn_weights", true, "attention scores are scaled by 1/sqrt(D)");
  hc.require("scale_attn_by_inverse_layer_idx", false, "attention scores are scaled by 1/sqrt(D) only");
  hc.require("add_cross_attention", false, "a decoder-only model");
  hc.require("tie_word_embeddings", true, "the GPT's head is its token embedding");
}

// The deck of the imported model (model keys from config.json, the rest gridtrain's defaults).
Config imported_config(const HfConfig& hc) {
  Config c = parse_config("", hc.path(), {});
  const std::string type = hc.get<std::string>("model_type");
  if (type == "llama") {
    llama_model(hc, c.model, kLlama);
  } else if (type == "mixtral") {
    llama_model(hc, c.model, kMixtral);
    mixtral_moe(hc, c);
  } else if (type == "qwen2_moe") {
    llama_model(hc, c.model, kQwen2Moe);
    qwen2_moe(hc, c);
  } else if (type == "gpt2") {
    gpt2_model(hc, c.model);
  } else {
    throw Error(hc.path() + ": model_type = \"" + type + "\" is not supported; valid: \"llama\", \"mixtral\", "
                "\"qwen2_moe\", \"gpt2\"");
  }
  c.model.vocab_size = hc.get<int>("vocab_size");
  return parse_config(config_text(c), hc.path() + " (as a deck)", {});  // the deck's own checks
}

// Every safetensors file of the directory: the index's shards, or model.safetensors.
std::vector<SafetensorsReader> weight_files(const fs::path& dir) {
  std::vector<SafetensorsReader> files;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    const json index = read_json(dir / "model.safetensors.index.json");
    std::set<std::string> shards;
    for (const auto& [name, file] : index.at("weight_map").items()) shards.insert(file.get<std::string>());
    for (const auto& s : shards) files.emplace_back((dir / s).string());
  } else if (fs::exists(dir / "model.safetensors")) {
    files.emplace_back((dir / "model.safetensors").string());
  } else {
    throw Error(dir.string() + ": no model.safetensors or model.safetensors.index.json (pytorch_model.bin is not "
                "read: convert it with transformers' save_pretrained(safe_serialization=True))");
  }
  return files;
}

// Where is `hf_name`'s tensor among files (nullptr: in none).
const SafetensorsReader* holding(const std::vector<SafetensorsReader>& files, const std::string& hf_name) {
  for (const auto& f : files)
    if (f.tensors().contains(hf_name)) return &f;
  return nullptr;
}

// A head stored beside its embedding under a config that ties them: transformers keeps the head
// the file holds (from_pretrained loads lm_head.weight after tying), so an identical one is the
// tied embedding and a different one makes the model untied (the llama), or cannot be computed
// (the GPT, whose head is always its embedding). Returns a note for the summary ("" if none).
std::string check_tied_head(const std::vector<SafetensorsReader>& files, Config::Model& m) {
  const bool ties = m.type == ModelType::Gpt || m.tie_embeddings;
  const std::string embedding = m.type == ModelType::Gpt ? "transformer.wte.weight" : "model.embed_tokens.weight";
  const auto* head = holding(files, "lm_head.weight");
  const auto* embed = holding(files, embedding);
  if (!ties || !head || !embed) return "";
  const auto h = head->read("lm_head.weight"), e = embed->read(embedding);
  if (h == e) return "";
  std::size_t differ = 0;
  for (std::size_t i = 0; i < std::min(h.size(), e.size()); ++i) differ += h[i] != e[i];
  const std::string what = "config.json ties the head (tie_word_embeddings), but lm_head.weight in " + head->path() +
                           " differs from " + embedding + " (" + std::to_string(differ) + " of " +
                           std::to_string(h.size()) + " elements)";
  if (m.type == ModelType::Gpt)
    throw Error(what + ": gridtrain's gpt computes its head with the token embedding only, and transformers would "
                "use this head; valid: a head equal to the embedding, or a llama-family model untied");
  m.tie_embeddings = false;
  return "note: " + what + "; imported untied (model.tie_embeddings = false) with the file's head, as transformers "
         "loads it\n";
}

// The tensors under gridtrain's names, checked against the model config.json describes; mixtral:
// the file names them as Mixtral does (hf::to_mixtral).
std::vector<hf::WholeTensor> read_tensors(const std::vector<SafetensorsReader>& files, const Config& cfg,
                                          const std::string& dir, bool mixtral) {
  // The names and global shapes of the model config.json describes, from its plan (no tensors).
  const auto plan = plan_model(cfg, DataShape{cfg.model.vocab_size}, {});
  const auto& lm_plan = dynamic_cast<const LanguageModelPlan&>(*plan);  // gpt and llama only reach here
  std::map<std::string, std::vector<std::int64_t>> want;  // gridtrain name → global shape
  for (const auto& n : lm_plan.names()) want[n] = lm_plan.shard(n).global_shape;
  std::vector<hf::WholeTensor> out;
  for (const auto& f : files)
    for (const auto& [hf_name, info] : f.tensors()) {
      const auto name = mixtral ? hf::from_mixtral(hf_name) : hf::from_hf(cfg.model.type, hf_name);
      const bool tied_head = hf_name == "lm_head.weight" && (cfg.model.type == ModelType::Gpt || cfg.model.tie_embeddings);
      if (!name || tied_head) continue;  // buffers; a tied head is the embedding (transformers ties it on load)
      const auto it = want.find(*name);
      if (it == want.end())
        throw Error(f.path() + ": tensor '" + hf_name + "' is not a parameter of the " + name_of(cfg.model.type) +
                    " that config.json describes (refused rather than dropped)");
      hf::WholeTensor t{*name, info.shape, f.read(hf_name)};
      if (hf::transposed(cfg.model.type, *name) && t.shape.size() == 2) t = hf::transpose(std::move(t));
      if (t.shape != it->second)
        throw Error(f.path() + ": tensor '" + hf_name + "' has shape " + shape_text({t.shape.begin(), t.shape.end()}) +
                    ", but config.json gives " + shape_text({it->second.begin(), it->second.end()}));
      want.erase(it);
      out.push_back(std::move(t));
    }
  if (!want.empty()) {
    const std::string& missing = want.begin()->first;
    throw Error(dir + ": tensor '" + (mixtral ? hf::to_mixtral(missing) : hf::to_hf(cfg.model.type, missing)) +
                "' is missing (" + std::to_string(want.size()) + " missing in all)");
  }
  return out;
}

// The model directory's Hugging Face tokenizer as a bundle (data/hf_tokenizer.hpp), or "" where
// it has no tokenizer.json; with a summary line. Its ids must lie within the model's vocabulary.
std::pair<std::string, std::string> read_tokenizer(const fs::path& dir, const Config& cfg) {
  if (!fs::exists(dir / "tokenizer.json"))
    return {"", "note: no tokenizer.json in " + dir.string() + ": none is kept; prepare data with the model's own "
                "tokenizer (`gridtrain prepare ... --tokenizer-json`)\n"};
  std::string bundle = read_hf_tokenizer(dir.string());
  const auto tokenizer = make_hf_tokenizer(bundle);  // reads the vocabulary and eos in C++: no Python starts
  if (tokenizer->vocab_size() > cfg.model.vocab_size)
    throw Error((dir / "tokenizer.json").string() + ": ids up to " + std::to_string(tokenizer->vocab_size() - 1) +
                ", but config.json's vocab_size is " + std::to_string(cfg.model.vocab_size) +
                ": the tokenizer is not this model's");
  std::string line = "kept its tokenizer (" + hf_tokenizer_names(bundle) + ", " +
                     std::to_string(tokenizer->vocab_size()) +
                     " ids) as /tokenizer/model: generate, export and runs from it use it\n";
  return {std::move(bundle), std::move(line)};
}

void write_weights_checkpoint(const std::string& path, const Config& cfg, const std::vector<hf::WholeTensor>& tensors,
                              const std::string& tokenizer, const std::string& source) {
  auto file = CheckpointFile::create(path, MPI_COMM_SELF);
  const hid_t root = file.root();
  h5_write_attr(root, "format", std::string(kCheckpointFormat));
  h5_write_attr(root, "version", static_cast<long long>(kCheckpointVersion));
  h5_write_attr(root, "step", 0LL);
  h5_write_attr(root, "tokens_seen", 0LL);
  h5_write_attr(root, "grid", GridShape{}.csv());  // one rank: every axis of size 1
  h5_write_attr(root, "deck", config_text(cfg));
  h5_write_attr(root, "created_by", std::string("gridtrain ") + kVersion + " import");
  h5_write_attr(root, "weights_only", source);
  for (const auto& t : tensors) {
    const std::vector<hsize_t> shape(t.shape.begin(), t.shape.end());
    file.write("/model/" + t.name, DType::F32, shape, Slab::all(shape), t.data.data());
  }
  if (!tokenizer.empty()) {
    const std::vector<hsize_t> shape{tokenizer.size()};
    file.write("/tokenizer/model", DType::U8, shape, Slab::all(shape), tokenizer.data());
    write_tokenizer_name(file, "hf");
  }
  file.close();
}

}  // namespace

std::string import_hf(const HfImportOptions& o) {
  try {
    const fs::path dir(o.input);
    const HfConfig hc(dir / "config.json");
    Config cfg = imported_config(hc);
    const auto files = weight_files(dir);
    const std::string head = check_tied_head(files, cfg.model);
    const auto tensors = read_tensors(files, cfg, o.input, hc.get<std::string>("model_type") == "mixtral");
    const auto [tokenizer, tokenizer_note] = read_tokenizer(dir, cfg);
    const std::string tmp = o.output + ".tmp";  // never a half-written file under the name asked for
    write_weights_checkpoint(tmp, cfg, tensors, tokenizer, "transformers: " + fs::absolute(dir).string());
    fs::rename(tmp, o.output);
    const std::string experts = cfg.moe.enabled() ? ", " + std::to_string(cfg.moe.experts) + " experts, top-" +
                                                         std::to_string(cfg.moe.top_k) : "";
    return "Imported " + o.input + " (" + name_of(cfg.model.type) + experts + ", " + std::to_string(tensors.size()) +
           " tensors) to " + o.output + ": weights only; start a run from it with --checkpoint.init_from=" + o.output +
           "\n" + head + tokenizer_note;
  } catch (const Error& e) {
    throw Error("import: " + std::string(e.what()));
  } catch (const std::exception& e) {
    throw Error("import: '" + o.input + "': " + e.what());
  }
}

}  // namespace gridtrain
