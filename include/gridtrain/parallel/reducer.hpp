// Data-parallel gradient reducer over grid.dp().
//
// Gradients live in flat fp32 buckets of about comm.bucket_mb MiB: every parameter's .grad is a
// view into its bucket (as PyTorch DDP's gradient_as_bucket_view), so autograd accumulates
// straight into the buffer that is communicated and no copy is made. Parameters are assigned to
// buckets in reverse registration order, the order backward produces their gradients.
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
// ZeRO (optim.zero_stage >= 1; Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", SC'20). Each bucket is padded to a multiple of dp and dp
// rank r owns its r-th contiguous shard. The parameters become views into flat parameter
// buckets of the same layout (as FSDP's flat parameters). Buckets are reduce-scattered instead
// of allreduced (started at the same points, overlapped alike), so a rank ends the step with the
// averaged gradient of its shard only; shard_pieces() gives the optimizer each parameter's part
// of the shard (a view into the rank's part of the flat parameter, .grad a view into the
// gradient shard).
//  - Stage 1: after the update gather_parameters() all-gathers every bucket in place. The
//    gradient shard is the rank's part of its bucket, so a rank holds Ψ gradients. Bytes sent per
//    step and rank: (dp−1)/dp · 4Ψ_pad for the reduce-scatter plus the same for the all-gather,
//    the 2Ψ(dp−1)/dp elements of the allreduce it replaces.
//  - Stage 2: as 1, and each gradient bucket is freed once its reduce-scatter is complete (the
//    buckets are allocated again at zero_grad), so from the exchange to the next step a rank holds
//    Ψ/dp gradients; during backward the whole buckets still fill (peak 4Ψ + 4Ψ/dp bytes).
//  - Stage 3: the buckets are the model's units (a transformer block, an embedding: model
//    unit_of), and a rank keeps only its shard of each flat parameter; the flat parameter's
//    storage is allocated and all-gathered just before the unit's forward and again before its
//    backward (ParameterGather, called by the model), and freed after each, so the parameters held
//    whole are the units in use and the next one, whose all-gather is started ahead (prefetch,
//    zero.prefetch). A unit's gradient bucket is allocated when its backward begins and freed once
//    reduce-scattered. Bytes sent per step and rank, one micro-batch: 3 · 4Ψ_pad (dp−1)/dp (two
//    all-gathers and a reduce-scatter); each further micro-batch all-gathers twice more. The
//    token embedding of a one-stage model stays gathered from the embedding to the end of
//    backward, since the tied output head uses it in between.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"
#include "gridtrain/parallel/parameter_gather.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

/// How a step's gradients were exchanged over dp.
enum class GradExchange {
  Overlapped,  ///< fp32 allreduce, buckets started during backward
  Blocking,    ///< fp32 allreduce started in finish() (comm.overlap = false)
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

/// This rank's piece of one parameter under ZeRO: elements [offset, offset + param.numel()) of
/// the parameter flattened. param is a 1-D view into the flat parameter bucket (the optimizer
/// updates it in place) whose .grad is a view into the gradient shard; empty where the
/// parameter lies outside the rank's shard.
struct ShardPiece {
  torch::Tensor param;
  std::int64_t offset = 0;
};

/// How the Reducer shards over dp (ZeRO above).
struct ZeroOptions {
  int stage = 0;  ///< 0..3; needs compression = None; with dp = 1 there is nothing to shard: 0
  /// Per parameter (registration order; missing: -1) its unit, or -1 for none. The parameters of
  /// one unit must be contiguous in registration order and get a bucket of their own; the others
  /// are bucketed by size. Stage 3 needs every parameter in a unit (the model's unit_of); below it
  /// the tied embedding is one, so that its gradient shard covers the same elements on both
  /// pipeline stages that hold it.
  std::vector<int> unit_of = {};
  bool prefetch = true;  ///< stage 3: gathering unit u starts the all-gather of the unit used next
};

class Reducer : public ParameterGather {
 public:
  /// params in registration order; bucket_mb > 0 (MiB). A tensor larger than a bucket gets a
  /// bucket of its own. Overlap happens only without compression and with dp > 1. Throws
  /// std::invalid_argument for ZeRO with compression, and for units that break the rules above.
  Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap,
          Compression compression = Compression::None, ZeroOptions zero = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Zeroes all buckets (the .grad views stay valid) and the step's counters, and decides this
  /// step's exchange: local when the optimizer exchanges its own state (local_gradients).
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
  /// ZeRO: this rank's piece of each parameter, in parameter order.
  std::vector<ShardPiece> shard_pieces() const;
  /// Parameter i's gradient after finish(): its .grad, or under ZeRO its piece of the gradient
  /// shard (a 1-D view; the same elements on every rank with the same layout and dp rank).
  torch::Tensor reduced_gradient(std::size_t i) const;
  /// ZeRO stages 1–2: all-gathers every parameter bucket in place after the shards were updated,
  /// and waits. Adds (dp−1)/dp of the buckets' bytes to bytes_sent(). A no-op at stages 0 and 3
  /// (stage 3 gathers each unit when the model next uses it).
  void gather_parameters();

  // ParameterGather (stage 3; the model calls these around each unit's use; no-ops below it).
  void gather(int unit) override;
  torch::Tensor release(int unit, const torch::Tensor& out, bool keep) override;
  /// Stage 3: all-gathers every unit and waits, so that all parameters hold their values (to
  /// save or load a checkpoint). A no-op below stage 3.
  void gather_all_parameters();
  /// Stage 3: frees every gathered unit; with adopt, first takes this rank's part of each flat
  /// parameter as its shard (after a checkpoint was loaded into the whole parameters).
  void release_all_parameters(bool adopt = false);

  /// Bytes this rank holds now in gradients (buckets and ZeRO shards) and in flat parameter
  /// buckets (ZeRO; stage 3: the shards and the units gathered; 0 at stage 0, where the model's
  /// own tensors hold the parameters), and the most each held at once so far.
  std::uint64_t gradient_bytes() const;
  std::uint64_t parameter_bytes() const;
  std::uint64_t gradient_peak_bytes() const { return gradient_peak_; }
  std::uint64_t parameter_peak_bytes() const { return parameter_peak_; }

  std::size_t bucket_count() const { return buckets_.size(); }
  /// Buckets started so far in this step (0 until the last micro-batch's backward).
  std::size_t buckets_started() const { return next_; }
  /// Bytes this rank sent on the dp axis in this step: 2(p−1)/p · bucket bytes per bucket (ring
  /// allreduce, Patarasuk & Yuan 2009), or what the compressed exchange sent.
  std::uint64_t bytes_sent() const { return bytes_; }
  /// This step's exchange (valid after zero_grad).
  GradExchange exchange() const { return exchange_; }
  /// Whether buckets start during backward (comm.overlap and no compression, dp > 1).
  bool overlaps() const { return overlap_; }
  const ExchangeStats& stats() const { return stats_; }

 private:
  enum class Held : std::uint8_t { Freed, InFlight, Gathered };  // a stage-3 flat parameter's storage

  /// Groups the parameters into buckets (units, then size) and fills the bucket tables.
  void form_buckets(double bucket_mb, const std::vector<int>& unit_of);
  /// ZeRO: makes the parameters views into flat parameter buckets; stage 3 keeps only the shards.
  void flatten_parameters();
  void mark_ready(std::size_t bucket);
  void start(std::size_t bucket);
  /// Tests the started buckets (driving MPI progress); stage >= 2 frees those complete.
  void poll();
  /// Allocates zeroed gradient buckets and points their parameters' .grad at views of them.
  void allocate_gradients();
  void allocate_gradient(std::size_t bucket);
  void free_gradient(std::size_t bucket);
  // Stage 3: a unit's flat parameter.
  void start_gather(std::size_t bucket);
  void materialize(std::size_t bucket);        // gathered when it returns
  void free_parameters(std::size_t bucket);    // waits for an all-gather in flight first
  void prefetch(int unit);                     // starts its all-gather if it is freed
  void before_backward(int unit);
  std::ptrdiff_t find_unit(int unit) const;     // its bucket, or -1 where this rank has no such unit
  std::size_t bucket_of_unit(int unit) const;  // throws std::logic_error for an undeclared unit
  void note_peaks();
  std::int64_t shard_size(std::size_t bucket) const { return bucket_numel_[bucket] / dp_.size(); }
  /// ZeRO: [lo, hi) of parameter i's bucket that lies in this rank's shard (lo = hi: none of it).
  std::pair<std::int64_t, std::int64_t> shard_range(std::size_t i) const;
  /// ZeRO: this rank's part of flat parameter bucket b (its shard at stage 3), 1-D.
  torch::Tensor own_parameters(std::size_t b) const;

  Axis& dp_;
  bool overlap_;
  std::vector<torch::Tensor> params_;
  int zero_stage_;
  bool prefetch_;
  std::vector<torch::Tensor> buckets_;            // flat fp32, contiguous (undefined when freed, stages 2-3)
  std::vector<std::int64_t> bucket_numel_;        // elements per bucket (a multiple of dp under ZeRO)
  std::vector<std::size_t> bucket_of_;            // parameter index → bucket
  std::vector<std::int64_t> offset_;              // parameter index → first element in its bucket
  std::vector<std::vector<std::size_t>> members_;  // bucket → its parameters
  std::vector<std::ptrdiff_t> unit_bucket_;       // unit → bucket, -1 where this rank has no such unit
  // ZeRO: flat parameter buckets, gradient shards (stage 1: views of the buckets), the stage-1
  // reduce-scatter's output while in flight, stage 3's parameter shards and their state.
  std::vector<torch::Tensor> flat_params_, shards_, received_, param_shards_;
  std::vector<Held> held_;
  std::vector<Work> gathers_;
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
  std::uint64_t bytes_ = 0;
  std::uint64_t gradient_peak_ = 0, parameter_peak_ = 0;
  Stopwatch in_flight_;   // since this step's first bucket started
  ExchangeStats stats_;
};

/// ZeRO stage 3: every parameter whole for the guard's lifetime (Reducer::gather_all_parameters),
/// released at its end; with adopt, the values the parameters then hold become the shards.
class WholeParameters {
 public:
  explicit WholeParameters(Reducer& r, bool adopt = false) : r_(r), adopt_(adopt) { r_.gather_all_parameters(); }
  ~WholeParameters() { r_.release_all_parameters(adopt_); }
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  Reducer& r_;
  bool adopt_;
};

}  // namespace gridtrain
