// Interface of trainable models: language models (gpt: token windows, next-token loss) and image
// classifiers (cnn: images, class labels). A new model is a new file pair implementing Model and
// ModelPlan, plus one entry in the central table of model/registry.cpp (keyed by the deck's
// model.type); the Trainer, pipeline engine, reducer and checkpointer never name a model.
//
// The step loop sees every workload the same way: a sample is one row of int64 values (a window
// of T + 1 tokens; or an image's C·H·W pixels followed by its label), split() cuts a batch of rows
// into the first stage's input and the last stage's targets, and the loss is summed over the
// targets' items (tokens; images), which are what throughput and FLOPs count.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/data/data_shape.hpp"
#include "gridtrain/model/layout.hpp"
#include "gridtrain/parallel/parameter_gather.hpp"
#include "gridtrain/parallel/shard.hpp"

namespace gridtrain {

class ModelPlan;

/// The keys and values of the positions decoded so far, per layer, (B, Hkv, length, D) each.
struct KvCache {
  std::vector<torch::Tensor> k, v;  ///< per layer; empty before the first call
  std::int64_t length = 0;          ///< positions held
};

class Model : public torch::nn::Module {
 public:
  /// rows (B, W) int64 sample rows → {the first stage's input, the last stage's targets}: for a
  /// language model ids (B, T) and next ids (B, T); for a classifier fp32 images (B, C, H, W)
  /// scaled to [0, 1] and labels (B,).
  virtual std::pair<torch::Tensor, torch::Tensor> split(const torch::Tensor& rows) const = 0;
  /// The mean cross-entropy over the targets' items (nats), a 0-d fp32 tensor; input and targets
  /// as split() makes them.
  virtual torch::Tensor loss(const torch::Tensor& input, const torch::Tensor& targets) = 0;
  // Pipeline stages: the first takes split()'s input, the others the previous stage's output
  // (B, T, C); the last stage's output goes to head_loss_sum. With one stage,
  // head_loss_sum(stage_forward(input), targets) / items == loss(input, targets). chunk: which of
  // the rank's model chunks runs (interleaved 1F1B: chunk c is virtual stage c·pp + stage; the
  // first stage's chunk 0 takes split()'s input, the last stage's last chunk feeds the head).
  // ids: split()'s input of the micro-batch on every stage, for a model that needs it there
  // (input_on_every_stage()); else undefined or ignored.
  virtual torch::Tensor stage_forward(const torch::Tensor& input, int chunk = 0, const torch::Tensor& ids = {}) = 0;
  /// Sums over every stage's layers that the loss of a micro-batch takes (a mixture of experts'
  /// balancing losses: moe::RouterLog), carried between pipeline stages beside the activations,
  /// their gradient coming back beside the activations' (PipelineEngine): how many fp32 values,
  /// 0 (the default) for none.
  virtual std::int64_t carried_width() const { return 0; }
  /// The sums from the stages before, for the next stage_forward ((carried_width(),) fp32 on the
  /// device; undefined: the model's first stage, zeros). Ignored without carried sums.
  virtual void carry_in(const torch::Tensor&) {}
  /// After stage_forward: the sums through this stage, differentiable (undefined without).
  virtual torch::Tensor carry_out() const { return {}; }
  /// Whether every pipeline stage's stage_forward needs the micro-batch's split() input (a
  /// language model's document masks and positions), not only the first's.
  virtual bool input_on_every_stage() const { return false; }
  /// The targets' items that carry loss (what the loss is the mean over): all of them here; a
  /// language model with data.eod_mask_loss leaves out the predictions from end-of-document tokens.
  virtual double items(const torch::Tensor& targets) const { return static_cast<double>(targets.numel()); }
  /// Sum of the cross-entropy over the targets' items from the last stage's output (last stage only).
  virtual torch::Tensor head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& targets) = 0;
  /// What validation sums from the last stage's output, a (k,) fp32 tensor: [0] the summed loss as
  /// head_loss_sum, then for a classifier [1] the number of correct top-1 predictions.
  virtual torch::Tensor head_sums(const torch::Tensor& hidden, const torch::Tensor& targets) {
    return head_loss_sum(hidden, targets).reshape({1});
  }
  /// Whether head_sums counts correct predictions (accuracy is reported).
  virtual bool classifier() const { return false; }
  /// idx (B, T) int64 → next-token logits (B, T, V) fp32, for `gridtrain generate`. With a
  /// cache, idx holds the T positions after the cache's length; their keys and values are
  /// appended to it (incremental decoding: T = 1 after the prompt costs one position's work).
  /// Throws std::invalid_argument when cache->length + T exceeds the context length, and
  /// std::logic_error unless the whole model is on this rank and is a language model.
  virtual torch::Tensor logits(const torch::Tensor& idx, KvCache* cache = nullptr) {
    (void)idx, (void)cache;
    throw std::logic_error("logits: not a language model");
  }
  /// State besides the parameters that checkpoints keep and that dp replicas average after each
  /// step (batch-norm running statistics), by parameter-style name; fp32 tensors, replicated.
  virtual std::vector<std::pair<std::string, torch::Tensor>> replica_state() { return {}; }
  /// All the state besides the parameters that checkpoints keep (under /model/, resharded as
  /// parameters are): replica_state() and state a step fix keeps equal on the replicas itself (the
  /// MoE routers' expert biases, app/expert_bias.hpp); fp32 tensors, replicated, loaded in place.
  virtual std::vector<std::pair<std::string, torch::Tensor>> kept_state() { return replica_state(); }
  virtual bool first_stage() const = 0;
  virtual bool last_stage() const = 0;
  /// Names of this rank's parameters that another pipeline stage holds a copy of, the copies'
  /// gradients summed after each backward (a language model's token embedding, shared with the
  /// last stage's output head: Press & Wolf 2017); empty: none. With one stage a tied parameter
  /// is listed too (it is bucketed alone, as on the stages that sum it).
  virtual std::vector<std::string> tied_parameters() const { return {}; }
  /// The setup report's words for the model: its type and options ("gpt, attention sdpa").
  virtual std::string describe() const = 0;
  /// How parameter (or replica_state) `name` of this rank maps onto the global tensor
  /// (checkpoints, init, norms).
  virtual ShardSpec shard(const std::string& name) const = 0;
  /// What parameter `name` is (sparsity.tensors, the sparsity report). This default goes by the
  /// global tensor's rank: 1-D a vector, 2-D a matrix, more a convolution kernel; models name
  /// their embeddings and output head.
  virtual TensorClass tensor_class(const std::string& name) const {
    const auto dims = shard(name).global_shape.size();
    return dims <= 1 ? TensorClass::Vector : dims == 2 ? TensorClass::Matrix : TensorClass::Conv;
  }
  /// Training FLOPs per item (forward + backward: 3 × 2 MACs) of the products with parameter
  /// `name`, the whole global tensor: what a density d of it scales by d (the sparsity report).
  /// This default: 6 × its elements for a matrix or head (each weight multiplies once per token),
  /// 0 for lookups and elementwise parameters (embeddings, vectors). Models with convolutions
  /// count their kernels' output positions.
  virtual double weight_flops_per_item(const std::string& name) const {
    const TensorClass c = tensor_class(name);
    if (c != TensorClass::Matrix && c != TensorClass::Head) return 0.0;
    double n = 1.0;
    for (const auto d : shard(name).global_shape) n *= static_cast<double>(d);
    return 6.0 * n;
  }

  /// This rank's part's sizes and costs (FLOPs per item, activation memory).
  virtual const ModelPlan& plan() const = 0;
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
  /// Training FLOPs (forward + backward) per item (token or image) of the whole model.
  virtual double flops_per_item() const = 0;
  /// ZeRO stage 3's units (Model::unit_of) on this rank.
  virtual int units() const = 0;
  /// Items per sample: T tokens of a window, or 1 image.
  virtual std::int64_t items_per_sample() const = 0;
  /// What an item is, for rates and reports: "token" or "image".
  virtual const char* item() const = 0;
  /// How flops_per_item counts, for reports: "6N + 12LCT per token".
  virtual const char* flops_formula() const = 0;
  /// What a batch's samples are, plural, for reports: "sequences of 128 tokens", "images".
  virtual std::string samples() const = 0;
  /// Shape of the activations a pipeline stage sends the next for a micro-batch of micro_batch
  /// samples, (B, T, C) for a transformer; empty for a model of one stage.
  virtual std::vector<std::int64_t> activation_shape(int micro_batch) const = 0;
  /// Estimated activation memory on this rank, bytes, while `in_flight` micro-batches of
  /// micro_batch samples wait for their backward, with activations of elem_bytes bytes (4 fp32,
  /// 2 bf16/fp16): what each keeps for backward (as train.recompute allows), plus what is built
  /// again while one layer is recomputed.
  virtual double activation_bytes(int micro_batch, int elem_bytes, int in_flight) const = 0;
  /// Training FLOPs per item that train.recompute adds to flops_per_item (the forwards run again).
  virtual double recompute_flops_per_item() const { return 0.0; }
  /// Bytes this rank sends over cp per layer and micro-batch of micro_batch samples, {forward,
  /// backward}, its activations elem_bytes wide; {0, 0} without context parallelism.
  virtual std::pair<double, double> context_bytes(int /*micro_batch*/, int /*elem_bytes*/) const { return {0.0, 0.0}; }
};

/// Number of elements over all parameters.
inline std::int64_t count_parameters(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace gridtrain
