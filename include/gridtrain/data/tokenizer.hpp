// Tokenizers: text ↔ token ids. "bytes" (the default: each byte is a token, vocab 256),
// "sentencepiece" (Kudo & Richardson 2018, through Google's SentencePiece C++ library) and "hf"
// (a transformers model's tokenizer.json, through Hugging Face's tokenizers: hf_tokenizer.hpp),
// each model kept as its serialized bytes so that data files and checkpoints carry it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gridtrain {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  ///< "bytes", "sentencepiece" or "hf"
  virtual int vocab_size() const = 0;
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  /// encode of each text: one call where the tokenizer runs elsewhere (hf), so that a batch costs
  /// one round trip.
  virtual std::vector<std::vector<std::int32_t>> encode_batch(const std::vector<std::string>& texts) const {
    std::vector<std::vector<std::int32_t>> ids;
    for (const auto& t : texts) ids.push_back(encode(t));
    return ids;
  }
  /// Ids outside [0, vocab_size) decode to nothing.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  /// The serialized model ("" for bytes): what a data file or a checkpoint stores.
  virtual std::string model() const = 0;
  /// The end-of-document token (SentencePiece's eos piece, </s>; hf: the eos_token), or -1 when
  /// there is none (bytes).
  virtual std::int32_t eod_id() const { return -1; }
};

/// The tokenizer `name` with serialized `model` (ignored for bytes). Throws gridtrain::Error for
/// an unknown name (listing the known ones) or a model its library cannot load.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& model = "");

/// What a serialized SentencePiece model (its ModelProto) says about encoding and decoding: the
/// pieces and the settings that SentencePieceProcessor::Encode / Decode follow. What an exporter to
/// another tokenizer library needs (interop/hf_export.cpp). Fields the file leaves out take the
/// proto's defaults, as SentencePiece does.
struct SentencePieceSpec {
  enum class Type { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
  struct Piece {
    std::string piece;  ///< UTF-8; "▁" (U+2581) stands for a space
    float score = 0;
    Type type = Type::Normal;
  };
  std::vector<Piece> pieces;  ///< in id order
  // trainer_spec
  int model_type = 1;  ///< 1 unigram, 2 bpe, 3 word, 4 char
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  ///< -1: none
  std::string unk_surface = " \xE2\x81\x87 ";              ///< what Decode writes for the unknown piece
  // normalizer_spec
  std::string normalizer_name;       ///< e.g. "identity", "nmt_nfkc" (the rule is precompiled_charsmap)
  std::string precompiled_charsmap;  ///< empty for identity
  std::string normalization_rule_tsv;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  // denormalizer_spec (decoding): present only in models trained with a decode rule
  bool has_denormalizer = false;
  std::string denormalizer_charsmap;
};

/// Reads the serialized SentencePiece model `model` (the protobuf wire format of ModelProto).
/// Throws gridtrain::Error for bytes that are not such a model.
SentencePieceSpec sentencepiece_spec(const std::string& model);

/// Trains a SentencePiece model (unigram) of vocab_size pieces on the lines of text_file and
/// returns it serialized. Identity normalization, no dummy prefix and byte fallback (bytes no
/// piece covers, a newline among them, become <0xNN> pieces), so decode(encode(text)) == text.
/// character_coverage (0, 1]: the share of the input's characters that get pieces of their own;
/// the rarest rest go through byte fallback. Samples at most 2 M lines of a larger input. Throws
/// gridtrain::Error on failure: for a vocab_size smaller than the pieces the covered characters
/// need, one that gives that number and the options that fix it.
std::string train_sentencepiece(const std::string& text_file, int vocab_size, double character_coverage = 0.9995);

}  // namespace gridtrain
