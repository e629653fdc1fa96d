#include "gridtrain/data/tokenizer.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {
namespace {

class Bytes : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int vocab_size() const override { return 256; }
  std::vector<std::int32_t> encode(const std::string& text) const override {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string text;
    for (auto id : ids)
      if (id >= 0 && id < 256) text += static_cast<char>(id);
    return text;
  }
  std::string model() const override { return ""; }
};

// The SentencePiece plugin (data/sentencepiece_plugin.cpp), loaded once: beside the executable,
// or where this build put it.
class Plugin {
 public:
  using Sink = void (*)(void*, const void*, std::size_t);
  const char* (*load)(const char*, std::size_t, void**) = nullptr;
  void (*free)(void*) = nullptr;
  int (*vocab)(void*) = nullptr;
  const char* (*encode)(void*, const char*, std::size_t, Sink, void*) = nullptr;
  const char* (*decode)(void*, const std::int32_t*, std::size_t, Sink, void*) = nullptr;
  const char* (*train)(const char*, Sink, void*) = nullptr;

  static const Plugin& get() {
    static const Plugin plugin;
    return plugin;
  }

  // Appends what the plugin hands back to a std::string or a vector of ids.
  template <class Out>
  static void append(void* ctx, const void* data, std::size_t bytes) {
    auto& out = *static_cast<Out*>(ctx);
    const auto* p = static_cast<const typename Out::value_type*>(data);
    out.insert(out.end(), p, p + bytes / sizeof(typename Out::value_type));
  }

 private:
  Plugin() {
    const char* name = "libgridtrain_sentencepiece.so";
    std::error_code ec;
    const auto beside = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / name;
    void* lib = nullptr;
    std::string tried;
    for (const auto& path : {beside.string(), std::string(GRIDTRAIN_SENTENCEPIECE_PLUGIN)}) {
      if ((lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND))) break;
      tried += "\n  " + path + ": " + ::dlerror();
    }
    if (!lib) throw Error(std::string("cannot load the SentencePiece plugin ") + name + ":" + tried);
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, symbol));
      if (!fn) throw Error(std::string("the SentencePiece plugin lacks ") + symbol);
    };
    bind(load, "gt_spm_load");
    bind(free, "gt_spm_free");
    bind(vocab, "gt_spm_vocab");
    bind(encode, "gt_spm_encode");
    bind(decode, "gt_spm_decode");
    bind(train, "gt_spm_train");
  }
};

class SentencePiece : public Tokenizer {
 public:
  explicit SentencePiece(std::string model) : plugin_(Plugin::get()), model_(std::move(model)) {
    if (const char* error = plugin_.load(model_.data(), model_.size(), &handle_))
      throw Error(std::string("SentencePiece cannot load the tokenizer model: ") + error);
  }
  ~SentencePiece() override { plugin_.free(handle_); }
  SentencePiece(const SentencePiece&) = delete;
  SentencePiece& operator=(const SentencePiece&) = delete;

  std::string name() const override { return "sentencepiece"; }
  int vocab_size() const override { return plugin_.vocab(handle_); }
  std::vector<std::int32_t> encode(const std::string& text) const override {
    std::vector<std::int32_t> ids;
    if (const char* error = plugin_.encode(handle_, text.data(), text.size(), &Plugin::append<std::vector<std::int32_t>>, &ids))
      throw Error(std::string("SentencePiece cannot encode: ") + error);
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::vector<std::int32_t> valid;
    for (auto id : ids)
      if (id >= 0 && id < vocab_size()) valid.push_back(id);
    std::string text;
    if (const char* error = plugin_.decode(handle_, valid.data(), valid.size(), &Plugin::append<std::string>, &text))
      throw Error(std::string("SentencePiece cannot decode: ") + error);
    return text;
  }
  std::string model() const override { return model_; }

 private:
  const Plugin& plugin_;
  std::string model_;
  void* handle_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& model) {
  if (name == "bytes") return std::make_unique<Bytes>();
  if (name == "sentencepiece") return std::make_unique<SentencePiece>(model);
  throw Error("unknown tokenizer '" + name + "'; known: bytes, sentencepiece");
}

std::string train_sentencepiece(const std::string& text_file, int vocab_size, double character_coverage) {
  const std::string options = "input=" + text_file + "\nvocab_size=" + std::to_string(vocab_size) +
                              "\ncharacter_coverage=" + std::to_string(character_coverage) +
                              "\nmodel_type=unigram\nnormalization_rule_name=identity\nadd_dummy_prefix=false\n"
                              "remove_extra_whitespaces=false\nbyte_fallback=true\ninput_sentence_size=2000000\n"
                              "shuffle_input_sentence=true\nminloglevel=1";
  std::string model;
  const char* error = Plugin::get().train(options.c_str(), &Plugin::append<std::string>, &model);
  if (!error) return model;
  std::cmatch need;  // SentencePiece's "Vocabulary size is smaller than required_chars. 300 vs 323."
  if (std::regex_search(error, need, std::regex(R"(smaller than required_chars\. (\d+) vs (\d+))")))
    throw Error("prepare: --vocab-size " + std::to_string(vocab_size) + " is too small for '" + text_file +
                "': SentencePiece needs at least " + need[2].str() + " pieces there (259 for byte fallback and control, "
                "one for each character that --character-coverage " + fmt("%g", character_coverage) +
                " gives a piece of its own). Give --vocab-size " + need[2].str() + " or more (thousands are usual), or a "
                "lower --character-coverage (the rarer characters become byte pieces)");
  throw Error("training the SentencePiece tokenizer on '" + text_file + "' failed: " + error);
}

}  // namespace gridtrain
