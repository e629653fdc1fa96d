// Interface of trainable language models and the registry keyed by the deck's model.type.
// A new model is a new file pair that registers itself in model/registry.cpp.
#pragma once
#include <memory>
#include <string>

#include <torch/torch.h>

#include "gridtrain/model/layout.hpp"
#include "gridtrain/parallel/parameter_gather.hpp"
#include "gridtrain/parallel/shard.hpp"

namespace gridtrain {

struct Config;

class LanguageModel : public torch::nn::Module {
 public:
  /// idx, targets: (B, T) int64 token ids. Returns the mean cross-entropy over B·T tokens (nats),
  /// a 0-d fp32 tensor.
  virtual torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) = 0;
  // Pipeline stages: the first takes token ids (B, T), the others the previous stage's output
  // (B, T, C); the last stage's output goes to head_loss_sum. With one stage,
  // head_loss_sum(stage_forward(idx), targets) / (B·T) == loss(idx, targets).
  virtual torch::Tensor stage_forward(const torch::Tensor& input) = 0;
  /// Sum of the cross-entropy over B·T tokens from the last stage's output (last stage only).
  virtual torch::Tensor head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& targets) = 0;
  /// idx (B, T) int64 → next-token logits (B, T, V) fp32. The whole model on one rank only (no
  /// tensor or pipeline parallelism: throws std::logic_error); used by `gridtrain generate`.
  virtual torch::Tensor logits(const torch::Tensor& idx) = 0;
  virtual bool first_stage() const = 0;
  virtual bool last_stage() const = 0;
  /// How parameter `name` of this rank maps onto the global tensor (checkpoints, init, norms).
  virtual ShardSpec shard(const std::string& name) const = 0;

  /// Training FLOPs (forward + backward) per token.
  virtual double flops_per_token() const = 0;
  /// Estimated activation memory kept for backward by one micro-batch of micro_batch sequences,
  /// bytes, with activations of elem_bytes bytes (4 fp32, 2 bf16/fp16).
  virtual double activation_bytes(int micro_batch, int elem_bytes) const = 0;
  /// Sets every parameter from (seed, parameter name) alone, independent of the process grid.
  virtual void initialize(std::uint64_t seed) = 0;

  /// ZeRO stage 3's unit of parameter `name` (parallel/parameter_gather.hpp): units are numbered
  /// in forward order on this rank, and each unit's parameters are contiguous in registration
  /// order.
  virtual int unit_of(const std::string& name) const = 0;
  /// Where stage_forward and head_loss_sum gather and release their units; null (the default):
  /// the parameters are always whole.
  void set_parameter_gather(ParameterGather* g) { gather_ = g; }

 protected:
  bool gathers() const { return gather_ != nullptr; }
  void gather(int unit) {
    if (gather_) gather_->gather(unit);
  }
  torch::Tensor release(int unit, const torch::Tensor& out, bool keep = false) {
    return gather_ ? gather_->release(unit, out, keep) : out;
  }

 private:
  ParameterGather* gather_ = nullptr;
};

/// What this rank's part of a model holds and costs, known without building it (--dry-run).
class ModelPlan {
 public:
  virtual ~ModelPlan() = default;
  /// Parameter elements this rank holds (shards and padding included).
  virtual std::int64_t parameters() const = 0;
  /// Training FLOPs (forward + backward) per token of the whole model.
  virtual double flops_per_token() const = 0;
  /// Estimated activation memory kept for backward by one micro-batch of micro_batch sequences
  /// on this rank, bytes, with activations of elem_bytes bytes (4 fp32, 2 bf16/fp16).
  virtual double activation_bytes(int micro_batch, int elem_bytes) const = 0;
};

/// The plan of c.model.type for `layout` (same errors as make_model).
std::unique_ptr<ModelPlan> plan_model(const Config& c, int vocab_size, const ModelLayout& layout);

/// Builds the model named by c.model.type with vocabulary vocab_size, this rank's part of it for
/// `layout` (default: the whole model). Throws gridtrain::Error for an unknown type (listing the
/// known ones).
std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size);
std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size, const ModelLayout& layout);

/// model.attention resolved: whether the fused kernel (at::scaled_dot_product_attention) is used.
/// Throws gridtrain::Error for sdpa on a LibTorch that lacks it (< 2.0).
bool fused_attention(const Config& c);

/// Number of elements over all parameters.
std::int64_t count_parameters(const torch::nn::Module& m);

}  // namespace gridtrain
