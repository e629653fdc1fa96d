// The transformers tokenizer of a run's SentencePiece model (gridtrain export --format hf): the
// tokenizers library's tokenizer.json that gives SentencePiece's ids and text, and its
// tokenizer_config.json (hf_tokenizer.cpp says how each part restates the model).
#pragma once
#include <string>

#include "gridtrain/data/tokenizer.hpp"

namespace gridtrain::hf {

/// tokenizer.json's text for the model: encode gives SentencePieceProcessor::Encode's ids (no
/// BOS/EOS), decode its text. Throws gridtrain::Error naming what of the model it cannot restate
/// exactly: a bpe/word/char model, treat_whitespace_as_suffix, escape_whitespaces = false, a
/// denormalizer, user-defined pieces with a normalization rule, a one-character unknown, control
/// or unused piece, or a piece no cut can keep from matching text.
std::string tokenizer_json(const SentencePieceSpec& spec);

/// tokenizer_config.json's text: the fast tokenizer as it is (no BOS/EOS added, special tokens
/// never matched in text, no clean-up of spaces on decode), model_max_length = block_size.
std::string tokenizer_config(const SentencePieceSpec& spec, int block_size);

/// The id of a special token of the model (spec.bos_id, eos_id, pad_id) when tokenizer_config
/// names it, that is when it is a control piece; -1 otherwise.
int special_id(const SentencePieceSpec& spec, int id);

}  // namespace gridtrain::hf
