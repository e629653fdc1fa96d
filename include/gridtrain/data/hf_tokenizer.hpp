// The tokenizer a transformers model ships (tokenizer.json, Hugging Face's `tokenizers` format),
// run by that library itself: a Python process per rank (src/data/hf_tokenizer.py over
// util/coprocess.hpp), started at the first encode or decode. Its serialized form, what data
// files and checkpoints store as /tokenizer/model, is a bundle of the model directory's tokenizer
// files: a JSON object from file name (tokenizer.json, and tokenizer_config.json and
// special_tokens_map.json where present) to the file's text, verbatim.
//
// The interpreter: $GRIDTRAIN_PYTHON, else the Python the build found (/usr/bin/python3 first,
// where scripts/install-deps installs the pinned `tokenizers`).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "gridtrain/data/tokenizer.hpp"

namespace gridtrain {

/// The bundle of `path`: a tokenizer.json file, or a directory holding one (a transformers model
/// directory; its tokenizer_config.json and special_tokens_map.json come along). Throws
/// gridtrain::Error naming the path when there is no tokenizer.json or a file is not JSON.
std::string read_hf_tokenizer(const std::string& path);

/// The files of a bundle, by name, as read. Throws gridtrain::Error for text that is no bundle.
std::map<std::string, std::string> hf_tokenizer_files(const std::string& bundle);

/// "tokenizer.json, tokenizer_config.json": the names of a bundle's files, for messages.
std::string hf_tokenizer_names(const std::string& bundle);

/// The "hf" tokenizer of a bundle. vocab_size: the largest id of the model's vocabulary and the
/// added tokens + 1. eod_id: tokenizer_config.json's (or special_tokens_map.json's) eos_token,
/// -1 when neither names one. encode adds no special tokens (no BOS/EOS): the ids of
/// `AutoTokenizer(text, add_special_tokens=False)`. Throws gridtrain::Error for a bundle that is
/// not one, or an eos_token that is no token of the vocabulary.
std::unique_ptr<Tokenizer> make_hf_tokenizer(std::string bundle);

}  // namespace gridtrain
