// The pipeline stage executor over grid.pp(): one step's micro-batches through this rank's stage
// (its model chunks, with the interleaved schedule) in train.schedule order (with one stage: forward, backward, forward, backward, ... = plain
// gradient accumulation). Activations go to the next stage and their gradients come back by
// non-blocking sends and blocking receives; the time waiting on them is the PpComm section
// (the bubble included). With pp > 1 the first and the last stage both hold the token
// embedding (the tied output head), and sum_tied_gradients() adds their gradients. Beside the
// activations go the model's carried sums (Model::carried_width: an MoE's router sums, so that
// the last stage's balancing losses cover every stage's layers), their gradients beside the
// activations' gradients. With train.schedule = zb-h1 the step's linears defer their weight
// gradients to a WeightGradStore, run at the schedule's Weight ops (precision/weight_grad_store.hpp).
//
// The engine knows the schedule and the wire, not the model: the Trainer hands it the shape of
// the activations between stages (ModelPlan::activation_shape), the stage's forward (model +
// autocast) and the micro-batches' samples.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

class PipelineEngine {
 public:
  /// Rows first..first+rows−1 of the batch on the device, as {the first stage's input, the last
  /// stage's targets} (Model::split: token ids (B, T) and next ids (B, T), or images and labels).
  using MicroBatch = std::function<std::pair<torch::Tensor, torch::Tensor>(std::int64_t first, int rows)>;
  /// What passes between virtual stages for one micro-batch: the activations x (B, T, C) and the
  /// model's carried sums (Model::carried_width() fp32 values; undefined without), each of
  /// whose gradients come back.
  struct Pass {
    torch::Tensor x, sums;
  };
  /// The stage's forward of model chunk `chunk`: in.x is the first stage's input (chunk 0), else
  /// the previous virtual stage's activations (B, T, C); in.sums the sums through the virtual
  /// stages before (zeros on the first; undefined in evaluate, and without carried sums); input
  /// is the micro-batch's first-stage input on every stage built with input_everywhere, else on
  /// the first and last stage only (undefined elsewhere). Returns the activations and the sums
  /// through this stage, or on the last stage's last chunk (targets defined) x = the loss summed
  /// over the targets' items, a 0-d fp32 tensor (in evaluate: a (k,) tensor of sums, the loss
  /// first).
  using Forward = std::function<Pass(const Pass& in, const torch::Tensor& input, const torch::Tensor& targets, int chunk)>;
  /// The shape of the activations between stages for a micro-batch of `rows` samples, (B, T, C).
  using ActivationShape = std::function<std::vector<std::int64_t>(int rows)>;
  /// Called before each backward pass; last: the step's last, whose gradients the reducers
  /// communicate (ParameterGroups::begin_backward).
  using BeforeBackward = std::function<void(bool last)>;

  /// chunks: model chunks on this rank (grid.virtual_stages with the interleaved schedule, else
  /// 1): chunk c of rank r is virtual stage c·pp + r, its activations go to rank r + 1, and from
  /// the last rank to chunk c + 1 on rank 0. tied: this stage holds parameters tied to another
  /// stage's (Model::tied_parameters: the token embedding on the first and the last stage;
  /// ignored with pp = 1). Collective over grid.pp() (the tied pair's axis is split off it).
  /// activation_dtype: of the activations and their gradients between stages (fp32, or the 2-byte
  /// weights' dtype, which the next stage's norms need their input in). input_everywhere: every
  /// stage takes its micro-batches (Model::input_on_every_stage), not only the first and last.
  /// carried: Model::carried_width(), the fp32 sums sent beside each pass's activations.
  PipelineEngine(Grid& grid, PipelineSchedule schedule, int chunks, ActivationShape activation_shape,
                 torch::ScalarType activation_dtype, torch::Device device, bool first_stage, bool last_stage,
                 bool tied, bool input_everywhere, std::int64_t carried, Timer& timer);

  /// One step: micro_batches micro-batches of micro_batch rows, each backward from its summed loss
  /// / items × loss_scale, each preceded by before_backward; items: what the step's loss on this
  /// rank is the mean over (its targets' items that carry loss; or a share of the global batch's).
  /// Returns on the last stage the step's mean loss (Σ of the micro-batch sums / items) as a 0-d
  /// tensor on the device, left there (no synchronization); undefined elsewhere. Throws
  /// std::bad_alloc / c10::OutOfMemoryError when out of memory, CommTimeout when a peer stage
  /// does not answer in comm.timeout_s.
  torch::Tensor train(int micro_batches, int micro_batch, const MicroBatch& batch, const Forward& forward,
                      const BeforeBackward& before_backward, double items, double loss_scale);
  /// Forward only over `rows` rows in micro-batches of micro_batch (validation). Returns on the
  /// last stage the sums forward returns added over the rows (the loss in nats first), empty
  /// elsewhere. Runs the forwards of padded_rows >= rows (the most any dp rank has), the extra
  /// ones on batch(first >= rows, 1), any one row, whose sums are dropped: every dp rank makes
  /// the same collectives (ZeRO stage 3 all-gathers inside each forward).
  std::vector<double> evaluate(std::int64_t rows, std::int64_t padded_rows, int micro_batch, const MicroBatch& batch,
                               const Forward& forward);
  /// Sums the tied parameters' gradients over the stages that hold them, in place (pp > 1; a
  /// no-op elsewhere). grads: this stage's, in Model::tied_parameters order, contiguous fp32:
  /// each parameter's .grad, or under ZeRO this rank's piece of it (the same elements on both
  /// stages). Run even after an out-of-memory error: it is a collective.
  void sum_tied_gradients(const std::vector<torch::Tensor>& grads);
  /// The tied pair's axis (first and last stage), whose bytes count as pipeline traffic; null
  /// where this rank is not in one.
  const Axis* tied_axis() const { return tied_.get(); }
  /// Seconds this rank's train() calls spent in each kind of pass, summed (compute and the tp
  /// and ep waits inside; not the pp waits): forwards F, backwards without their weight
  /// gradients B, and the weight gradients W (zb-h1; elsewhere inside B); and the micro-batches.
  struct PassSeconds {
    double forward = 0, input = 0, weight = 0;
    long long micro_batches = 0;
  };
  const PassSeconds& pass_seconds() const { return pass_s_; }

 private:
  torch::Tensor receive(std::vector<std::int64_t> shape, const torch::TensorOptions& options, int peer, int tag);
  Grid& grid_;
  PipelineSchedule schedule_;
  int chunks_;
  ActivationShape activation_shape_;
  torch::TensorOptions activations_;  // dtype and device of the activations between stages
  bool first_, last_, input_everywhere_;
  std::int64_t carried_;  // fp32 sums beside the activations (0: none)
  std::unique_ptr<Axis> tied_;  // first and last stage (pp > 1 only)
  Timer& timer_;
  PassSeconds pass_s_;
};

}  // namespace gridtrain
