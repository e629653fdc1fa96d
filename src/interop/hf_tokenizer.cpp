// The exported tokenizer (gridtrain export --format hf): tokenizer.json, the tokenizers library's
// format, and tokenizer_config.json from a run's SentencePiece model.
//
// gridtrain encodes with SentencePieceProcessor::Encode on the raw text, no BOS/EOS, and decodes
// with Decode. tokenizer.json restates the model for the tokenizers library so that transformers'
// fast tokenizer gives the same ids and text, whatever flags the model has; what it cannot restate
// exactly is refused by name. The pieces (SentencePiece's Unigram model.cc and normalizer.cc):
//   normalizer: the precompiled character map (identity: none), then with remove_extra_whitespaces
//     no leading or trailing spaces and runs of spaces as one, then spaces as "▁", then with
//     add_dummy_prefix a "▁" in front of non-empty text;
//   model: Unigram over the pieces and scores, unk id, byte fallback (<0x00>..<0xFF>);
//   pre_tokenizer: SentencePiece matches only normal and user-defined pieces in text, the
//     tokenizers Unigram every piece it holds. So each piece that text must not produce (unknown,
//     control, unused, byte) is cut, where it occurs in the text, at a point no matchable piece
//     crosses (which changes no segmentation SentencePiece could make); user-defined pieces stand
//     alone, as SentencePiece always emits them whole;
//   decoder: the unknown piece as SentencePiece's surface " ⁇ ", "▁" as a space, byte pieces as
//     bytes, and with a dummy prefix the first space dropped;
//   control pieces (<s>, </s>, …) are special tokens, never matched in text (split_special_tokens).
#include "hf_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain::hf {
namespace {

using ojson = nlohmann::ordered_json;  // tokenizer.json's keys in the tokenizers library's order
using Spec = SentencePieceSpec;
using Type = SentencePieceSpec::Type;

const std::string kRefuse = "the run's SentencePiece model cannot be written as an exact transformers tokenizer: ";


const char* type_name(Type t) {
  switch (t) {
    case Type::Normal: return "normal";
    case Type::Unknown: return "unknown";
    case Type::Control: return "control";
    case Type::UserDefined: return "user-defined";
    case Type::Unused: return "unused";
    case Type::Byte: return "byte";
  }
  return "?";
}

// A piece as code points, with the byte offset of each (and one past the end).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<std::size_t> at;
};

CodePoints code_points(const std::string& s) {
  CodePoints r;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<std::size_t>(n) > s.size()) throw Error("a piece is not UTF-8");
    char32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    r.cp.push_back(c);
    r.at.push_back(i);
    i += static_cast<std::size_t>(n);
  }
  r.at.push_back(s.size());
  return r;
}

// The piece text for messages: printable, with "▁" kept (it is what the vocabulary shows).
std::string quoted(const std::string& piece) {
  std::string out = "'";
  for (unsigned char c : piece) {
    if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string describe(const Spec& spec, std::size_t id) {
  return std::string(type_name(spec.pieces[id].type)) + " piece " + quoted(spec.pieces[id].piece) + " (id " +
         std::to_string(id) + ")";
}

// s as a literal in the tokenizers library's regular expressions (Oniguruma, Ruby syntax).
std::string regex_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += digits[(v >> k) & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

ojson replace(const ojson& pattern, const std::string& content) {
  return {{"type", "Replace"}, {"pattern", pattern}, {"content", content}};
}

// Where to cut the piece `f` (one text must never produce) where it occurs in the text: the first
// point k (code points before it) that no matchable piece crosses at any alignment with f, and
// where (without byte fallback) two unknown characters do not meet (SentencePiece fuses a run of
// them into one unknown token). -1 if none; `blocker` then names a piece in the way.
struct Matchable {
  std::vector<CodePoints> pieces;
  std::vector<std::size_t> ids;
  std::unordered_map<std::uint64_t, std::vector<std::pair<std::size_t, std::size_t>>> by_bigram;  // (piece, j)
  std::unordered_map<char32_t, bool> single;  // characters that are a matchable piece by themselves
};

int guard_cut(const CodePoints& f, const Matchable& m, bool byte_fallback, std::size_t& blocker) {
  const auto n = f.cp.size();
  for (std::size_t k = 1; k < n; ++k) {
    bool crossed = false;
    const auto key = static_cast<std::uint64_t>(f.cp[k - 1]) << 32 | f.cp[k];
    if (const auto hit = m.by_bigram.find(key); hit != m.by_bigram.end()) {
      for (const auto& [qi, j] : hit->second) {
        const auto& q = m.pieces[qi].cp;
        // q[j], q[j+1] over f[k-1], f[k]: q starts at s = k-1-j (relative to f); compare the overlap.
        const auto s = static_cast<std::ptrdiff_t>(k - 1) - static_cast<std::ptrdiff_t>(j);
        const auto lo = std::max<std::ptrdiff_t>(s, 0);
        const auto hi = std::min<std::ptrdiff_t>(s + static_cast<std::ptrdiff_t>(q.size()), static_cast<std::ptrdiff_t>(n));
        bool same = true;
        for (auto i = lo; i < hi && same; ++i) same = q[static_cast<std::size_t>(i - s)] == f.cp[static_cast<std::size_t>(i)];
        if (same) {
          crossed = true;
          blocker = m.ids[qi];
          break;
        }
      }
    }
    if (!crossed && !byte_fallback && !m.single.count(f.cp[k - 1]) && !m.single.count(f.cp[k])) {
      crossed = true;
      blocker = static_cast<std::size_t>(-1);
    }
    if (!crossed) return static_cast<int>(k);
  }
  return -1;
}

// Refuses what of the model's kind and flags tokenizer.json cannot restate.
void check_model_kind(const Spec& spec) {
  static const char* model_types[] = {"?", "unigram", "bpe", "word", "char"};
  if (spec.model_type != 1)
    throw Error(kRefuse + "model_type = " + (spec.model_type >= 1 && spec.model_type <= 4 ? model_types[spec.model_type] : "?") +
                " (only unigram models are supported)");
  if (spec.treat_whitespace_as_suffix) throw Error(kRefuse + "treat_whitespace_as_suffix = true is not supported");
  if (!spec.escape_whitespaces) throw Error(kRefuse + "escape_whitespaces = false is not supported");
  if (spec.has_denormalizer) throw Error(kRefuse + "a denormalizer (decoding rule) is not supported");
  const auto& pieces = spec.pieces;
  if (spec.unk_id < 0 || static_cast<std::size_t>(spec.unk_id) >= pieces.size() ||
      pieces[static_cast<std::size_t>(spec.unk_id)].type != Type::Unknown)
    throw Error(kRefuse + "unk_id " + std::to_string(spec.unk_id) + " is not its unknown piece");
}

// The pieces text may produce (normal, user-defined), indexed for guard_cut; the user-defined
// and the guarded (unknown, control, unused, byte) ids. Refuses pieces it cannot restate.
struct Pieces {
  Matchable m;
  std::vector<std::size_t> users, guarded;
};

Pieces classify(const Spec& spec) {
  const auto& pieces = spec.pieces;
  Pieces r;
  auto& m = r.m;
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const auto& p = pieces[id];
    if (!std::isfinite(p.score)) throw Error(kRefuse + describe(spec, id) + " has the score " + fmt("%g", p.score));
    if (p.type == Type::Normal && p.score > 0)
      throw Error(kRefuse + describe(spec, id) + " has a positive score (" + fmt("%g", p.score) + ")");
    if (p.piece.empty()) throw Error(kRefuse + "piece " + std::to_string(id) + " is empty");
    if (p.type == Type::Normal || p.type == Type::UserDefined) {
      auto cp = code_points(p.piece);
      if (cp.cp.size() == 1) m.single[cp.cp[0]] = true;
      for (std::size_t j = 0; j + 1 < cp.cp.size(); ++j)
        m.by_bigram[static_cast<std::uint64_t>(cp.cp[j]) << 32 | cp.cp[j + 1]].emplace_back(m.pieces.size(), j);
      m.pieces.push_back(std::move(cp));
      m.ids.push_back(id);
      if (p.type == Type::UserDefined) r.users.push_back(id);
    } else {
      r.guarded.push_back(id);
    }
  }
  if (!r.users.empty() && !spec.precompiled_charsmap.empty())
    throw Error(kRefuse + "user-defined pieces with the normalization rule '" + spec.normalizer_name +
                "' are not supported (SentencePiece leaves them unnormalized)");
  return r;
}

// The model: every piece at its id. Normal pieces keep their scores; the others get 0, the top
// score (a user-defined piece then wins its own stretch of text, as in SentencePiece) and one
// that leaves the minimum, and so the unknown piece's penalty, where SentencePiece has them.
ojson unigram(const Spec& spec) {
  const auto& pieces = spec.pieces;
  ojson vocab = ojson::array();
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const auto& p = pieces[id];
    vocab.push_back({p.piece, p.type == Type::Normal ? static_cast<double>(p.score) : 0.0});
  }
  return {{"type", "Unigram"}, {"unk_id", spec.unk_id}, {"vocab", vocab}, {"byte_fallback", spec.byte_fallback}};
}

// The control pieces (<s>, </s>, ...) as special tokens, never matched in text.
ojson added_tokens(const Spec& spec) {
  ojson added = ojson::array();
  for (std::size_t id = 0; id < spec.pieces.size(); ++id)
    if (spec.pieces[id].type == Type::Control)
      added.push_back({{"id", id}, {"content", spec.pieces[id].piece}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  return added;
}

ojson normalizer(const Spec& spec) {
  ojson normalizers = ojson::array();
  if (!spec.precompiled_charsmap.empty())
    normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64(spec.precompiled_charsmap)}});
  if (spec.remove_extra_whitespaces) {
    normalizers.push_back(replace({{"Regex", R"(\A +| +\z)"}}, ""));
    normalizers.push_back(replace({{"Regex", " {2,}"}}, " "));
  }
  normalizers.push_back(replace({{"String", " "}}, "\xE2\x96\x81"));
  if (spec.add_dummy_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
  return {{"type", "Sequence"}, {"normalizers", normalizers}};
}

// User-defined pieces split off whole; the guarded pieces cut where they occur (see the top).
ojson pre_tokenizer(const Spec& spec, Pieces& p) {
  const auto& pieces = spec.pieces;
  auto& users = p.users;
  ojson pre = ojson::array();
  if (!users.empty()) {
    std::sort(users.begin(), users.end(), [&](auto a, auto b) { return pieces[a].piece.size() > pieces[b].piece.size(); });
    std::string alternatives;
    for (auto id : users) alternatives += (alternatives.empty() ? "" : "|") + regex_literal(pieces[id].piece);
    pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", alternatives}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  if (!p.guarded.empty()) {
    std::vector<std::pair<std::string, std::vector<std::string>>> cuts;  // what precedes the cut, what may follow
    for (auto id : p.guarded) {
      const auto f = code_points(pieces[id].piece);
      if (f.cp.size() < 2)
        throw Error(kRefuse + "the " + describe(spec, id) + " is one character, which transformers' Unigram model would "
                    "match in text (SentencePiece never does)");
      std::size_t blocker = 0;
      const int k = guard_cut(f, p.m, spec.byte_fallback, blocker);
      if (k < 0)
        throw Error(kRefuse + "the " + describe(spec, id) + " cannot be kept from matching text: " +
                    (blocker == static_cast<std::size_t>(-1) ? std::string("its characters have no pieces of their own")
                                                             : "every cut inside it is crossed by the " + describe(spec, blocker)));
      const auto& s = pieces[id].piece;
      const auto cut = f.at[static_cast<std::size_t>(k)];
      auto at = std::find_if(cuts.begin(), cuts.end(), [&](const auto& c) { return c.first == s.substr(0, cut); });
      if (at == cuts.end()) at = cuts.insert(cuts.end(), {s.substr(0, cut), {}});
      at->second.push_back(regex_literal(s.substr(cut)));
    }
    std::string alternatives;
    for (const auto& [before, after] : cuts) {
      std::string follow;
      for (const auto& a : after) follow += (follow.empty() ? "" : "|") + a;
      alternatives += (alternatives.empty() ? "" : "|") + regex_literal(before) + "(?=" + follow + ")";
    }
    pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", alternatives}}}, {"behavior", "MergedWithPrevious"},
                   {"invert", false}});
  }
  return pre.empty() ? ojson(nullptr) : ojson{{"type", "Sequence"}, {"pretokenizers", pre}};
}

ojson decoder(const Spec& spec) {
  const auto& pieces = spec.pieces;
  ojson decoders = ojson::array();
  const auto& unk = pieces[static_cast<std::size_t>(spec.unk_id)].piece;
  if (unk != spec.unk_surface) decoders.push_back(replace({{"String", unk}}, spec.unk_surface));
  decoders.push_back(replace({{"String", "\xE2\x96\x81"}}, " "));
  if (spec.byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (spec.add_dummy_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", decoders}};
}

}  // namespace

std::string tokenizer_json(const Spec& spec) {
  check_model_kind(spec);
  Pieces pieces = classify(spec);
  const ojson json = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added_tokens(spec)},
                      {"normalizer", normalizer(spec)},
                      {"pre_tokenizer", pre_tokenizer(spec, pieces)},
                      {"post_processor", nullptr},
                      {"decoder", decoder(spec)},
                      {"model", unigram(spec)}};
  return json.dump(2) + "\n";
}

std::string tokenizer_config(const Spec& spec, int block_size) {
  nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", block_size},
                           {"add_bos_token", false}, {"add_eos_token", false}, {"split_special_tokens", true},
                           {"clean_up_tokenization_spaces", false}};
  const std::pair<const char*, int> special[] = {{"bos_token", spec.bos_id}, {"eos_token", spec.eos_id}, {"pad_token", spec.pad_id}};
  for (const auto& [key, id] : special)
    if (special_id(spec, id) >= 0) config[key] = spec.pieces[static_cast<std::size_t>(id)].piece;
  return config.dump(2) + "\n";
}

int special_id(const Spec& spec, int id) {
  const bool control = id >= 0 && static_cast<std::size_t>(id) < spec.pieces.size() &&
                       spec.pieces[static_cast<std::size_t>(id)].type == Type::Control;
  return control ? id : -1;
}

}  // namespace gridtrain::hf
