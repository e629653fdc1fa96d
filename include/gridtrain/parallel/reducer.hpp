// Data-parallel gradient reducer over grid.dp().
//
// Gradients live in flat buckets of the parameters' dtype (fp32, or bf16 | fp16 with
// precision.weights; parallel/bucket_layout.hpp, about comm.bucket_mb MiB each): every
// parameter's .grad is a view into its bucket (as PyTorch DDP's gradient_as_bucket_view), so
// autograd accumulates straight into the buffer that is communicated and no copy is made.
//
// With overlap (comm.overlap = true), a post-hook on each parameter's gradient accumulator marks
// it ready during the backward of the step's last micro-batch; when a bucket's last gradient is
// ready its non-blocking sum-allreduce starts at once, while backward goes on computing earlier
// layers (hooks also poll outstanding requests, which drives MPI progress). Buckets always start
// in bucket order, so every rank issues the same sequence of collectives whatever order its
// gradients arrive in. finish() starts what is left, waits, and divides by dp: every replica gets
// the same sum, so replicas stay bitwise identical, with or without overlap.
//
// With comm.compression = fp16 | bf16 each bucket is exchanged by the two-phase compressed
// allreduce (comm/compressor.hpp) in finish(), without overlap for now. A step whose optimizer
// exchanges its own state (1-bit Adam after its freeze) keeps its gradients local. The Reducer is
// the one owner of that decision (zero_grad) and reports what it did (stats()), so the summary
// prints the exchange that happened, not the deck's wish.
//
// ZeRO (optim.zero_stage >= 1; Rajbhandari et al. 2020; the parameter side is
// parallel/sharded_parameters.hpp). Buckets are reduce-scattered instead of allreduced (started
// at the same points, overlapped alike), so a rank ends the step with the averaged gradient of
// its shard only (reduced_gradient).
//  - Stage 1: the gradient shard is the rank's part of its bucket, so a rank holds Ψ gradients.
//    Bytes sent per step and rank: (dp−1)/dp · 4Ψ_pad for the reduce-scatter plus the same for
//    the parameters' all-gather, the 2Ψ(dp−1)/dp elements of the allreduce it replaces.
//  - Stage 2: as 1, and each gradient bucket is freed once its reduce-scatter is complete (the
//    buckets are allocated again at zero_grad), so from the exchange to the next step a rank holds
//    Ψ/dp gradients; during backward the whole buckets still fill (peak 4Ψ + 4Ψ/dp bytes).
//  - Stage 3: the buckets are the model's units; a unit's gradient bucket is allocated when its
//    backward begins (GradientStorage, asked by ShardedParameters) and freed once
//    reduce-scattered, and the Reducer tells ShardedParameters when a unit's gradients are
//    complete (ParameterStorage) so that it frees the unit's parameters. Bytes sent per step and
//    rank, one micro-batch: 3 · 4Ψ_pad (dp−1)/dp (two all-gathers and a reduce-scatter); each
//    further micro-batch all-gathers twice more.
// Bytes are counted where they are sent, on the dp Axis (comm/traffic.hpp makes a step's record).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/parallel/bucket_layout.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"
#include "gridtrain/parallel/unit_storage.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

/// How a step's gradients were exchanged over dp.
enum class GradExchange {
  Overlapped,  ///< allreduce (of the gradients' dtype), buckets started during backward
  Blocking,    ///< allreduce started in finish() (comm.overlap = false)
  Compressed,  ///< two-phase fp16/bf16 exchange in finish()
  Local,       ///< none: the optimizer exchanges its own state (1-bit Adam after its freeze)
  kCount
};
/// "overlapped with backward", ... as printed in the summary.
const char* describe(GradExchange e);

/// What the Reducer did over a run, on this rank.
struct ExchangeStats {
  std::array<long long, static_cast<std::size_t>(GradExchange::kCount)> steps{};  ///< steps per kind
  double in_flight_s = 0;  ///< from each step's first bucket start to the end of finish(), summed
  double exposed_s = 0;    ///< seconds spent inside finish() (communication backward did not hide)
};

class Reducer : public GradientStorage {
 public:
  /// params in registration order, laid out by layout (its shards = dp at ZeRO stage >= 1).
  /// Overlap happens only without compression and with dp > 1. zero_stage: the stage in effect
  /// (0 with dp = 1; > 0 only with compression = None: DataParallel checks). parameters: told
  /// when a unit's gradients are complete (stage 3; may be null below it).
  Reducer(std::vector<torch::Tensor> params, std::shared_ptr<const BucketLayout> layout, Axis& dp, bool overlap,
          Compression compression, int zero_stage, ParameterStorage* parameters);
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Zeroes all buckets (the .grad views stay valid), and decides this step's exchange: local
  /// when the optimizer exchanges its own state (local_gradients).
  void zero_grad(bool local_gradients = false);
  /// Call before each micro-batch's backward; `last` marks the one whose gradients are
  /// communicated (with gradient accumulation, earlier micro-batches do not communicate).
  void begin_backward(bool last);
  /// Starts every bucket not started yet, waits for all, and averages over dp (nothing for a
  /// local step).
  void finish();
  /// Multiplies every gradient by factor (clipping); under ZeRO this rank's gradient shards.
  void scale(double factor);

  /// ZeRO stage in effect (0: none, or dp = 1).
  int zero_stage() const { return zero_stage_; }
  /// Parameter i's gradient after finish(): its .grad, or under ZeRO its piece of the gradient
  /// shard (a 1-D view; the same elements on every rank with the same layout and dp rank).
  torch::Tensor reduced_gradient(std::size_t i) const;
  // GradientStorage (stage 3: before a unit's backward).
  void ensure_gradient(std::size_t bucket) override;

  /// Bytes this rank holds now in gradients (buckets and ZeRO shards), and the most it held at
  /// once so far.
  std::uint64_t gradient_bytes() const;
  std::uint64_t gradient_peak_bytes() const { return gradient_peak_; }

  std::size_t bucket_count() const { return buckets_.size(); }
  /// The gradients' dtype, as the deck names it: "fp32", or precision.weights' "bf16" | "fp16".
  const char* gradient_dtype() const;
  /// Buckets started so far in this step (0 until the last micro-batch's backward).
  std::size_t buckets_started() const { return next_; }
  /// This step's exchange (valid after zero_grad).
  GradExchange exchange() const { return exchange_; }
  /// Whether buckets start during backward (comm.overlap and no compression, dp > 1).
  bool overlaps() const { return overlap_; }
  const ExchangeStats& stats() const { return stats_; }

 private:
  void mark_ready(std::size_t bucket);
  void start(std::size_t bucket);
  /// Tests the started buckets (driving MPI progress); stage >= 2 frees those complete.
  void poll();
  void free_gradient(std::size_t bucket);
  void note_peak();

  Axis& dp_;
  bool overlap_;
  std::vector<torch::Tensor> params_;
  std::shared_ptr<const BucketLayout> layout_;
  int zero_stage_;
  ParameterStorage* parameters_;
  std::vector<torch::Tensor> buckets_;            // flat fp32, contiguous (undefined when freed, stages 2-3)
  // ZeRO: gradient shards (stage 1: views of the buckets), the stage-1 reduce-scatter's output
  // while in flight.
  std::vector<torch::Tensor> shards_, received_;
  std::vector<int> pending_;                      // parameters not yet ready in this backward, per bucket
  std::vector<Work> work_;                        // per bucket
  std::unique_ptr<Compressor> compressor_;        // null: plain fp32 allreduce
  std::vector<FeedbackState> feedback_;           // per bucket, for error-feedback compressors
  // The gradient accumulator node (shared_ptr in LibTorch 1.x, intrusive_ptr in 2.x) and its
  // post-hook key.
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<std::pair<AccumulatorPtr, std::uintptr_t>> hooks_;
  bool communicating_ = false;
  GradExchange exchange_ = GradExchange::Blocking;
  std::size_t next_ = 0;  // next bucket to start
  std::uint64_t gradient_peak_ = 0;
  Stopwatch in_flight_;   // since this step's first bucket started
  ExchangeStats stats_;
};

}  // namespace gridtrain
