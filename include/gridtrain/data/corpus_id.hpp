// What identifies a training corpus: checkpoints record it and a resume compares it, so that a
// run does not continue on other data without a word.
#pragma once
#include <cstdint>
#include <string>

namespace gridtrain {

/// The corpus a run trains on, stored in each checkpoint and compared at resume: the data
/// position means nothing in another file.
struct CorpusId {
  std::string sha256;  ///< the data file's sha256 attribute (of the source text); "" when it has none
  /// The splits' sizes: tokens, or images (checkpoint attributes train_tokens, val_tokens).
  std::uint64_t train_size = 0, val_size = 0;
  std::string tokenizer;        ///< the data file's tokenizer ("bytes"), for `gridtrain generate`
  std::string tokenizer_model;  ///< its serialized model ("" for bytes), stored as /tokenizer/model
  std::string blend;            ///< data.blend normalized (BlendSpec::text), or "" for one corpus
};

}  // namespace gridtrain
