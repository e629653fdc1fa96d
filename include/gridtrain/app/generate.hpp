// `gridtrain generate`: samples text from a checkpoint of any layout, on one rank, on the CPU or
// a GPU (what users first do with a trained language model). The checkpoint's deck rebuilds the
// model whole, its global tensors fill it, and its recorded tokenizer decodes the tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

class Model;
class Tokenizer;

/// A language model whole on this rank with a checkpoint's weights, the run's tokenizer (null
/// for an imported checkpoint, which records none) and the deck's model.matmul.
struct InferenceModel {
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  Matmul matmul = Matmul::Auto;
};

/// The model of the checkpoint's deck with its global tensors (any layout wrote it). Throws
/// std::runtime_error naming what is wrong (gridtrain::Error for a model that is not a language
/// model).
InferenceModel load_language_model(const std::string& path);

struct GenerateOptions {
  std::string checkpoint;        ///< a checkpoint file (step-XXXXXXXX.h5)
  std::string prompt = "\n";     ///< text the sample continues (encoded with the tokenizer)
  int max_new_tokens = 200;
  double temperature = 0.8;      ///< > 0 divides the logits; 0 = greedy (argmax)
  int top_k = 40;                ///< sample among the k most likely tokens; 0 = all
  std::uint64_t seed = 1;        ///< the sampler's generator: the same seed, the same text
  std::string device = "cpu";    ///< cpu or cuda[:N]
  bool kv_cache = true;          ///< keep each layer's keys and values: a new token costs one position
  std::optional<Matmul> matmul;  ///< the fp32 CPU linears' library; unset: the checkpoint deck's model.matmul
};

/// What generate_text made, and how long it took (wall seconds).
struct Generated {
  std::string text;               ///< the new tokens, decoded
  std::int64_t prompt_tokens = 0;
  double first_token_s = 0;       ///< time to the first new token (the prompt's forward included)
  double later_tokens_s = 0;      ///< time for the other new tokens
};

/// The text generated after the prompt (max_new_tokens tokens, decoded) and its timing. Sampling runs on the host in fp32 from each step's last
/// logits, so a seed gives the same tokens wherever the logits are equal. Throws gridtrain::Error
/// naming the file for a missing or unreadable checkpoint (or its tokenizer model), an empty
/// prompt, invalid options, a device that is not there, or a matmul library that cannot run
/// here (model.matmul = onednn on a CPU oneDNN's matmul refuses).
Generated generate_text(const GenerateOptions& o);

}  // namespace gridtrain
