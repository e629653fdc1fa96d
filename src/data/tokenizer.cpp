#include "gridtrain/data/tokenizer.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <string_view>
#include <utility>

#include "gridtrain/data/hf_tokenizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {
namespace {

// The protobuf wire format, as far as a SentencePiece ModelProto needs it: (field, wire type)
// tags, varints, 32-bit floats and length-delimited strings and messages; other fields skipped.
class Wire {
 public:
  explicit Wire(std::string_view bytes) : p_(bytes) {}
  bool done() const { return p_.empty(); }
  // The next field's number and wire type.
  std::pair<int, int> tag() {
    const auto key = varint();
    return {static_cast<int>(key >> 3), static_cast<int>(key & 7)};
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) bad("a varint runs past the end");
      const auto b = static_cast<unsigned char>(p_.front());
      p_.remove_prefix(1);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("a varint is longer than 10 bytes");
  }
  std::string_view bytes() {
    const auto n = varint();
    if (n > p_.size()) bad("a field's length runs past the end");
    const auto v = p_.substr(0, n);
    p_.remove_prefix(n);
    return v;
  }
  float fixed32() {
    if (p_.size() < 4) bad("a 32-bit field runs past the end");
    std::uint32_t u = 0;
    for (int i = 3; i >= 0; --i) u = (u << 8) | static_cast<unsigned char>(p_[static_cast<std::size_t>(i)]);
    p_.remove_prefix(4);
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  // Skips a field of wire type `type` that the reader does not use.
  void skip(int type) {
    switch (type) {
      case 0: varint(); break;
      case 1: take(8); break;
      case 2: bytes(); break;
      case 5: take(4); break;
      default: bad("wire type " + std::to_string(type) + " (groups are not used by SentencePiece)");
    }
  }
  // An int32 field: negative values are written as 64-bit two's complement.
  int int32() { return static_cast<int>(static_cast<std::int64_t>(varint())); }

  [[noreturn]] static void bad(const std::string& what) {
    throw Error("the SentencePiece model is not a valid ModelProto: " + what);
  }

 private:
  void take(std::size_t n) {
    if (p_.size() < n) bad("a fixed-size field runs past the end");
    p_.remove_prefix(n);
  }
  std::string_view p_;
};

template <class Fn>
void each_field(std::string_view message, Fn fn) {
  Wire w(message);
  while (!w.done()) {
    const auto [field, type] = w.tag();
    if (!fn(w, field, type)) w.skip(type);
  }
}

// NormalizerSpec (normalizer_spec = 3, denormalizer_spec = 5 of ModelProto).
void read_normalizer(std::string_view message, std::string& name, std::string& charsmap, std::string* rule_tsv,
                     bool* dummy_prefix, bool* remove_extra, bool* escape) {
  each_field(message, [&](Wire& w, int field, int type) {
    if (type == 2 && field == 1) return name = w.bytes(), true;
    if (type == 2 && field == 2) return charsmap = w.bytes(), true;
    if (type == 2 && field == 6 && rule_tsv) return *rule_tsv = w.bytes(), true;
    if (type == 0 && field == 3 && dummy_prefix) return *dummy_prefix = w.varint() != 0, true;
    if (type == 0 && field == 4 && remove_extra) return *remove_extra = w.varint() != 0, true;
    if (type == 0 && field == 5 && escape) return *escape = w.varint() != 0, true;
    return false;
  });
}

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
    eod_ = sentencepiece_spec(model_).eos_id;
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
  std::int32_t eod_id() const override { return eod_; }

 private:
  const Plugin& plugin_;
  std::string model_;
  std::int32_t eod_ = -1;
  void* handle_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& model) {
  if (name == "bytes") return std::make_unique<Bytes>();
  if (name == "sentencepiece") return std::make_unique<SentencePiece>(model);
  if (name == "hf") return make_hf_tokenizer(model);
  throw Error("unknown tokenizer '" + name + "'; known: bytes, sentencepiece, hf");
}

SentencePieceSpec sentencepiece_spec(const std::string& model) {
  SentencePieceSpec spec;
  each_field(model, [&](Wire& w, int field, int type) {
    if (type != 2) return false;
    const auto message = w.bytes();
    if (field == 1) {  // pieces
      SentencePieceSpec::Piece piece;
      each_field(message, [&](Wire& p, int f, int t) {
        if (f == 1 && t == 2) return piece.piece = p.bytes(), true;
        if (f == 2 && t == 5) return piece.score = p.fixed32(), true;
        if (f == 3 && t == 0) {
          const auto v = p.varint();
          if (v < 1 || v > 6) Wire::bad("piece " + std::to_string(spec.pieces.size()) + " has type " + std::to_string(v));
          return piece.type = static_cast<SentencePieceSpec::Type>(v), true;
        }
        return false;
      });
      spec.pieces.push_back(std::move(piece));
    } else if (field == 2) {  // trainer_spec
      each_field(message, [&](Wire& t, int f, int wt) {
        if (wt == 0) {
          switch (f) {
            case 3: return spec.model_type = t.int32(), true;
            case 24: return spec.treat_whitespace_as_suffix = t.varint() != 0, true;
            case 35: return spec.byte_fallback = t.varint() != 0, true;
            case 40: return spec.unk_id = t.int32(), true;
            case 41: return spec.bos_id = t.int32(), true;
            case 42: return spec.eos_id = t.int32(), true;
            case 43: return spec.pad_id = t.int32(), true;
            default: return false;
          }
        }
        if (wt == 2 && f == 44) return spec.unk_surface = t.bytes(), true;
        return false;
      });
    } else if (field == 3) {  // normalizer_spec
      read_normalizer(message, spec.normalizer_name, spec.precompiled_charsmap, &spec.normalization_rule_tsv,
                      &spec.add_dummy_prefix, &spec.remove_extra_whitespaces, &spec.escape_whitespaces);
    } else if (field == 5) {  // denormalizer_spec
      std::string name;
      read_normalizer(message, name, spec.denormalizer_charsmap, nullptr, nullptr, nullptr, nullptr);
      spec.has_denormalizer = !spec.denormalizer_charsmap.empty();
    }  // (others, such as self_test_data: read past)
    return true;
  });
  if (spec.pieces.empty()) Wire::bad("it has no pieces");
  return spec;
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
