// The tokenizer a checkpoint carries, so that `gridtrain generate` and `export` use the one the
// weights were trained with: /tokenizer/model (its serialized model, uint8) and the /tokenizer
// group's attribute `name` (sentencepiece | hf). Files from before the name was recorded have
// the /data attribute `tokenizer` only, which is the corpus's (docs/checkpoint-format.md).
#pragma once
#include <optional>
#include <string>

#include "gridtrain/checkpoint/checkpoint_file.hpp"

namespace gridtrain {

struct TokenizerRecord {
  std::string name;   ///< as make_tokenizer takes it: bytes | sentencepiece | hf
  std::string model;  ///< its serialized model ("" for bytes)
};

/// The tokenizer `file` carries: /tokenizer's name and model; else the /data attribute tokenizer
/// (bytes when a file predates it) with /tokenizer/model where present. nullopt where it carries
/// none: weights imported without a tokenizer.json, a run on data that records none (a Megatron
/// dataset's "none", an image set's). Throws std::runtime_error for an unreadable attribute.
std::optional<TokenizerRecord> read_tokenizer_record(const CheckpointFile& file);

/// Writes /tokenizer's attribute name; /tokenizer/model must be written already. Collective
/// over the file's communicator (an HDF5 metadata write): every rank passes the same name.
void write_tokenizer_name(const CheckpointFile& file, const std::string& name);

/// "hf (a model of 1234 bytes)", "bytes": a record in words, for messages.
std::string describe(const TokenizerRecord& t);

}  // namespace gridtrain
