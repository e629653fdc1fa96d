// Hugging Face transformers checkpoints, both ways (docs/interoperability.md):
//   export: a gridtrain checkpoint of any layout → a directory that
//           LlamaForCausalLM / GPT2LMHeadModel.from_pretrained(DIR) loads (config.json,
//           model.safetensors or shards + model.safetensors.index.json, generation_config.json,
//           the SentencePiece tokenizer where the run had one);
//   import: such a directory (fp32, bf16 or fp16 safetensors, sharded or not) → a weights-only
//           gridtrain checkpoint, which checkpoint.init_from starts a run from.
// The llama's parameter names are transformers' own; the gpt's map onto GPT-2's
// (transformer.<name>, Conv1D weights stored transposed as (in, out)).
#pragma once
#include <string>

namespace gridtrain {

struct HfExportOptions {
  std::string checkpoint;     ///< a gridtrain checkpoint file (step-XXXXXXXX.h5)
  std::string output;         ///< the directory to write (created; files of the same names replaced)
  double max_shard_mb = 5000;  ///< past this many MB of weights, model-0000k-of-0000n.safetensors shards
};

/// Writes the export; returns what it wrote and any caveat (a byte-level vocabulary has no
/// transformers tokenizer; a checkpoint may carry none), one line each. The tokenizer written
/// is the one the checkpoint carries (checkpoint/tokenizer_record.hpp): a SentencePiece model as
/// tokenizer.json + tokenizer.model, a Hugging Face bundle as the files it was read from;
/// config.json gets its bos and eos ids (null where it has none). Throws gridtrain::Error naming
/// the file for an unreadable checkpoint or one whose model transformers has no counterpart for
/// (cnn).
std::string export_hf(const HfExportOptions& o);

struct HfImportOptions {
  std::string input;   ///< a transformers model directory (config.json + safetensors)
  std::string output;  ///< the gridtrain checkpoint file to write
};

/// Writes the import; returns a summary line, and a note where a config that ties the head
/// (tie_word_embeddings) comes with an lm_head.weight unlike the embedding: the llama is then
/// imported untied with the file's head, as transformers loads it. A tokenizer.json in the
/// directory is kept (as /tokenizer/model, an hf bundle: data/hf_tokenizer.hpp), and a line
/// says so or that there is none. Throws gridtrain::Error
/// naming the file and key or tensor for: a model_type other than llama and gpt2; a config
/// gridtrain does not compute (rope scaling, biases, sliding windows, another activation, a
/// GPT-2 head unlike its embedding, …: refused by name, never dropped); a missing, unknown or
/// misshapen tensor; a bad safetensors file (safetensors.hpp); a tokenizer whose ids reach past
/// config.json's vocab_size, or one make_hf_tokenizer refuses.
std::string import_hf(const HfImportOptions& o);

}  // namespace gridtrain
