// A small convolutional image classifier (model.type = cnn), a VGG-style net (Simonyan &
// Zisserman 2015) with batch normalisation (Ioffe & Szegedy 2015): for each width w_s of
// model.channels, a stage of two [3×3 conv (no bias) → batch-norm → ReLU] layers then a 2×2
// max-pooling, and a linear head on the flattened last feature map. Parameter names:
// stage<s>.conv<j>.weight, stage<s>.bn<j>.{weight,bias} (j = 1, 2), head.{weight,bias};
// batch-norm running statistics stage<s>.bn<j>.{running_mean,running_var} are its replica_state.
//
// Data parallel only (grid.tp = grid.pp = 1; the launch plan refuses more). Batch-norm statistics
// are per replica: each dp rank normalises with its own micro-batch's statistics, as DDP without
// SyncBatchNorm does, so a layout's losses equal those of one rank running the same micro-batches
// (one micro-batch per forward: the same micro_batch gives the same statistics). The running
// statistics, used for evaluation, are averaged over dp after every step, so replicas stay equal.
#pragma once
#include <vector>

#include "gridtrain/model/model.hpp"

namespace gridtrain {

struct CnnShape {
  int channels = 1, height = 28, width = 28, classes = 10;
  std::vector<int> widths = {32, 64};  ///< output channels per stage (model.channels)
};

class CnnPlan : public ModelPlan {
 public:
  /// Throws gridtrain::Error when the image is too small for the stages (each halves H and W).
  explicit CnnPlan(const CnnShape& s);
  const CnnShape& shape() const { return s_; }
  std::int64_t parameters() const override;
  /// 3 × the forward's 2·MACs of the convolutions and the head (backward ≈ 2 × forward; batch
  /// norm, ReLU and pooling are a few FLOPs per element and left out), per image.
  double flops_per_item() const override;
  int units() const override { return static_cast<int>(s_.widths.size()) + 1; }  // stages, head
  std::int64_t items_per_sample() const override { return 1; }
  const char* item() const override { return "image"; }
  const char* flops_formula() const override { return "3 x 2 MACs per image"; }
  std::string samples() const override { return "images"; }
  /// Empty: a cnn has one pipeline stage.
  std::vector<std::int64_t> activation_shape(int) const override { return {}; }
  /// What backward keeps per image: each stage's input, both batch-norm inputs and both ReLU
  /// outputs (the next layer's and the pooling's inputs are those same tensors) at elem_bytes,
  /// and the pooling's int64 indices; times in_flight (the CNN recomputes nothing).
  double activation_bytes(int micro_batch, int elem_bytes, int in_flight) const override;
  /// Features entering the head: w_last · (H / 2^S) · (W / 2^S).
  std::int64_t head_features() const;

 private:
  CnnShape s_;
};

class Cnn : public Model {
 public:
  explicit Cnn(const CnnShape& s);
  /// rows (B, C·H·W + 1): pixel values 0..255 then the label → images (B, C, H, W) fp32 in [0, 1]
  /// and labels (B,) int64.
  std::pair<torch::Tensor, torch::Tensor> split(const torch::Tensor& rows) const override;
  torch::Tensor loss(const torch::Tensor& images, const torch::Tensor& labels) override;
  torch::Tensor stage_forward(const torch::Tensor& images, int chunk = 0, const torch::Tensor& ids = {}) override;  // (B, C, H, W) → logits (B, classes); one chunk
  torch::Tensor head_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) override;
  torch::Tensor head_sums(const torch::Tensor& logits, const torch::Tensor& labels) override;
  bool classifier() const override { return true; }
  std::vector<std::pair<std::string, torch::Tensor>> replica_state() override;
  bool first_stage() const override { return true; }
  bool last_stage() const override { return true; }
  std::string describe() const override;
  /// {tensor_class, weight_flops_per_item}: head.weight is the head; a stage's conv kernels run at
  /// its input resolution, 6 × elements × (H/2^s)·(W/2^s) FLOPs per image.
  TensorClass tensor_class(const std::string& name) const override;
  double weight_flops_per_item(const std::string& name) const override;
  /// Every tensor is replicated (no tensor parallelism).
  ShardSpec shard(const std::string& name) const override;
  const ModelPlan& plan() const override { return plan_; }
  /// Kaiming-normal conv weights (He et al. 2015, fan-in, ReLU gain), batch-norm weight 1 and
  /// bias 0, head ~ N(0, 1/fan_in) and bias 0; each tensor from its own generator seeded by
  /// splitmix64(seed, fnv1a(name)).
  void initialize(std::uint64_t seed) override;
  /// Stage s is unit s, the head unit S.
  int unit_of(const std::string& name) const override;

 private:
  struct Stage : torch::nn::Module {
    explicit Stage(int in, int out);
    torch::Tensor forward(torch::Tensor x);  // (B, in, H, W) -> (B, out, H/2, W/2)
    torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
    torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  };
  CnnPlan plan_;
  std::vector<std::shared_ptr<Stage>> stages_;
  torch::nn::Linear head_{nullptr};
};

}  // namespace gridtrain
