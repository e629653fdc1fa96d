// Interface of trainable language models and the registry keyed by the deck's model.type.
// A new model is a new file pair that registers itself in model/registry.cpp.
#pragma once
#include <memory>
#include <string>

#include <torch/torch.h>

namespace gridtrain {

struct Config;

class LanguageModel : public torch::nn::Module {
 public:
  /// idx, targets: (B, T) int64 token ids. Returns the mean cross-entropy over B·T tokens (nats),
  /// a 0-d fp32 tensor.
  virtual torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) = 0;
  /// Sum (not mean) of the cross-entropy over B·T tokens, for validation.
  virtual torch::Tensor loss_sum(const torch::Tensor& idx, const torch::Tensor& targets) = 0;
  /// Training FLOPs (forward + backward) per token.
  virtual double flops_per_token() const = 0;
  /// Estimated activation memory kept for backward by one micro-batch of micro_batch sequences,
  /// bytes, with activations of elem_bytes bytes (4 fp32, 2 bf16/fp16).
  virtual double activation_bytes(int micro_batch, int elem_bytes) const = 0;
  /// Sets every parameter from (seed, parameter name) alone, independent of the process grid.
  virtual void initialize(std::uint64_t seed) = 0;
};

/// Builds the model named by c.model.type with vocabulary vocab_size. Throws gridtrain::Error for
/// an unknown type (listing the known ones).
std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size);

/// Number of elements over all parameters.
std::int64_t count_parameters(const torch::nn::Module& m);

}  // namespace gridtrain
