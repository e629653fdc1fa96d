#include "gridtrain/data/hf_tokenizer.hpp"

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "corpus_writer.hpp"
#include "gridtrain/util/coprocess.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};

json parse(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(what + " is not JSON: " + e.what());
  }
}

// The helper program: beside the executable (a build or bundle directory), else the source tree's.
std::string helper_path() {
  std::error_code ec;
  const auto beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "hf_tokenizer.py";
  return !ec && fs::exists(beside) ? beside.string() : std::string(GRIDTRAIN_HF_TOKENIZER_HELPER);
}

std::string python() {
  const char* env = std::getenv("GRIDTRAIN_PYTHON");
  return env && *env ? env : GRIDTRAIN_DEFAULT_PYTHON;
}

// A token's text (eos_token is a string, or an AddedToken object {"content": ...}).
std::string token_text(const json& v) { return v.is_object() ? v.value("content", "") : v.get<std::string>(); }

// The id of `token` among the added tokens and the model's vocabulary, or -1.
std::int32_t find_token(const json& tok, const std::string& token) {
  for (const auto& a : tok.value("added_tokens", json::array()))
    if (a.value("content", "") == token) return a.at("id").get<std::int32_t>();
  const json& vocab = tok.at("model").value("vocab", json::object());
  if (vocab.is_object()) return vocab.contains(token) ? vocab[token].get<std::int32_t>() : -1;
  for (std::size_t i = 0; i < vocab.size(); ++i)  // Unigram: [[piece, score], ...] in id order
    if (vocab[i].at(0) == token) return static_cast<std::int32_t>(i);
  return -1;
}

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(std::string bundle) : bundle_(std::move(bundle)) {
    files_ = hf_tokenizer_files(bundle_);
    const json tok = parse(files_.at("tokenizer.json"), "tokenizer.json");
    if (!tok.contains("model")) throw Error("tokenizer.json has no \"model\": not a tokenizers file");
    const json& vocab = tok["model"].value("vocab", json::object());
    int top = vocab.is_array() ? static_cast<int>(vocab.size()) - 1 : -1;
    if (vocab.is_object())
      for (const auto& [piece, id] : vocab.items()) top = std::max(top, id.get<int>());
    for (const auto& a : tok.value("added_tokens", json::array())) top = std::max(top, a.at("id").get<int>());
    vocab_ = top + 1;
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
      const auto f = files_.find(name);
      if (f == files_.end() || eod_ >= 0) continue;
      const json cfg = parse(f->second, name);
      if (!cfg.contains("eos_token") || cfg["eos_token"].is_null()) continue;
      const std::string eos = token_text(cfg["eos_token"]);
      if ((eod_ = find_token(tok, eos)) < 0)
        throw Error(std::string(name) + ": eos_token '" + eos + "' is no token of tokenizer.json");
    }
  }
  ~HfTokenizer() override = default;

  std::string name() const override { return "hf"; }
  int vocab_size() const override { return vocab_; }
  std::vector<std::int32_t> encode(const std::string& text) const override { return encode_batch({text}).front(); }

  std::vector<std::vector<std::int32_t>> encode_batch(const std::vector<std::string>& texts) const override {
    std::string request = "E";  // no special tokens: BOS/EOS are the data's business (--append-eod)
    put<std::uint32_t>(request, static_cast<std::uint32_t>(texts.size()));
    for (const auto& t : texts) {
      put<std::uint64_t>(request, t.size());
      request += t;
    }
    auto& p = process(request);
    std::vector<std::vector<std::int32_t>> out(texts.size());
    for (auto& ids : out) {
      ids.resize(get<std::uint32_t>(p));
      p.receive(ids.data(), ids.size() * sizeof(std::int32_t));
    }
    return out;
  }

  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::vector<std::int32_t> valid;
    for (auto id : ids)
      if (id >= 0 && id < vocab_) valid.push_back(id);
    std::string request = "D";
    put<std::uint32_t>(request, static_cast<std::uint32_t>(valid.size()));
    request.append(reinterpret_cast<const char*>(valid.data()), valid.size() * sizeof(std::int32_t));
    auto& p = process(request);
    std::string text(get<std::uint64_t>(p), '\0');
    p.receive(text.data(), text.size());
    return text;
  }

  std::string model() const override { return bundle_; }
  std::int32_t eod_id() const override { return eod_; }

 private:
  template <class T>
  static void put(std::string& out, T v) {  // little-endian: x86-64 and aarch64 both are
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  static T get(Coprocess& p) {
    T v;
    p.receive(&v, sizeof v);
    return v;
  }

  // Sends a request and reads its status: the process, started and loaded on first use, ready
  // for the answer's body. An error status becomes gridtrain::Error with the library's message.
  Coprocess& process(const std::string& request) const {
    if (!process_) {
      process_ = std::make_unique<Coprocess>(std::vector<std::string>{python(), helper_path()},
                                             "the Hugging Face tokenizer (" + python() + " " + helper_path() + ")");
      std::string load = "J";
      put<std::uint64_t>(load, files_.at("tokenizer.json").size());
      exchange(load + files_.at("tokenizer.json"), "load tokenizer.json");
    }
    exchange(request, request[0] == 'E' ? "encode" : "decode");
    return *process_;
  }

  void exchange(const std::string& request, const char* doing) const {
    process_->send(request.data(), request.size());
    if (get<std::uint8_t>(*process_) == 0) return;
    std::string message(get<std::uint64_t>(*process_), '\0');
    process_->receive(message.data(), message.size());
    throw Error(std::string("the Hugging Face tokenizers library cannot ") + doing + ": " + message);
  }

  std::string bundle_;
  std::map<std::string, std::string> files_;
  int vocab_ = 0;
  std::int32_t eod_ = -1;
  mutable std::unique_ptr<Coprocess> process_;
};

}  // namespace

std::string read_hf_tokenizer(const std::string& path) {
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path main = fs::is_directory(path) ? dir / "tokenizer.json" : fs::path(path);
  if (!fs::is_regular_file(main))
    throw Error("Hugging Face tokenizer '" + path + "': " +
                (fs::is_directory(path) ? "the directory holds no tokenizer.json" : "no such file") +
                "; give a tokenizer.json or a transformers model directory with one");
  json bundle = json::object();
  for (const char* name : kFiles) {
    const fs::path file = std::string(name) == "tokenizer.json" ? main : dir / name;
    if (!fs::is_regular_file(file)) continue;
    const std::string text = read_file(file.string());
    parse(text, file.string());
    bundle[name] = text;
  }
  return bundle.dump();
}

std::map<std::string, std::string> hf_tokenizer_files(const std::string& bundle) {
  const json b = parse(bundle, "the Hugging Face tokenizer bundle");
  if (!b.is_object() || !b.contains("tokenizer.json"))
    throw Error("the Hugging Face tokenizer bundle holds no tokenizer.json");
  std::map<std::string, std::string> files;
  for (const auto& [name, text] : b.items()) files[name] = text.get<std::string>();
  return files;
}

std::string hf_tokenizer_names(const std::string& bundle) {
  std::string names;
  for (const auto& [name, text] : hf_tokenizer_files(bundle)) names += (names.empty() ? "" : ", ") + name;
  return names;
}

std::unique_ptr<Tokenizer> make_hf_tokenizer(std::string bundle) {
  try {
    return std::make_unique<HfTokenizer>(std::move(bundle));
  } catch (const json::exception& e) {  // valid JSON of the wrong shape: an id that is no number, say
    throw Error(std::string("the Hugging Face tokenizer files are malformed: ") + e.what());
  }
}

}  // namespace gridtrain
