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
// of the shard (a view into the flat parameter, .grad a view into the gradient shard), and after
// the update gather_parameters() all-gathers every bucket in place. Bytes sent per step and rank:
// (dp−1)/dp · 4Ψ_pad for the reduce-scatter plus the same for the all-gather, the 2Ψ(dp−1)/dp
// elements of the allreduce it replaces. Stage 2 also frees the gradient buckets after the
// reduce-scatter (they are allocated again at zero_grad), so from the exchange to the next step a
// rank holds 1/dp of the gradients; during backward the whole buckets still fill (peak 4Ψ + 4Ψ/dp
// bytes: DeepSpeed's stage 2, which reduces and frees bucket by bucket, is not built).
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

class Reducer {
 public:
  /// params in registration order; bucket_mb > 0 (MiB). A tensor larger than a bucket gets a
  /// bucket of its own. Overlap happens only without compression and with dp > 1.
  /// zero_stage 0..2 (ZeRO above; needs compression = None; with dp = 1 there is nothing to
  /// shard and it acts as 0); own_bucket >= 0: the index of a
  /// parameter that gets a bucket of its own (the tied embedding under ZeRO, so that its gradient
  /// shard covers the same elements on both pipeline stages that hold it).
  Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap,
          Compression compression = Compression::None, int zero_stage = 0, std::ptrdiff_t own_bucket = -1);
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
  /// ZeRO: all-gathers every parameter bucket in place after the shards were updated, and waits.
  /// Adds (dp−1)/dp of the buckets' bytes to bytes_sent(). A no-op at stage 0.
  void gather_parameters();
  /// Bytes this rank holds in gradients (buckets and ZeRO shards) and in flat parameter buckets
  /// (ZeRO; 0 at stage 0, where the model's own tensors hold the parameters).
  std::uint64_t gradient_bytes() const;
  std::uint64_t parameter_bytes() const;

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
  void mark_ready(std::size_t bucket);
  void start(std::size_t bucket);
  /// Allocates the zeroed gradient buckets and points every .grad at its view.
  void allocate_gradients();
  std::int64_t shard_size(std::size_t bucket) const { return bucket_numel_[bucket] / dp_.size(); }
  /// ZeRO: [lo, hi) of parameter i's bucket that lies in this rank's shard (lo = hi: none of it).
  std::pair<std::int64_t, std::int64_t> shard_range(std::size_t i) const;

  Axis& dp_;
  bool overlap_;
  std::vector<torch::Tensor> params_;
  int zero_stage_;
  std::vector<torch::Tensor> buckets_;            // flat fp32, contiguous (undefined between steps at stage 2)
  std::vector<std::int64_t> bucket_numel_;        // elements per bucket (a multiple of dp under ZeRO)
  std::vector<std::size_t> bucket_of_;            // parameter index → bucket
  std::vector<std::int64_t> offset_;              // parameter index → first element in its bucket
  std::vector<torch::Tensor> flat_params_, shards_;  // ZeRO: flat parameter buckets, gradient shards
  std::vector<int> bucket_size_;                  // parameters per bucket
  std::vector<int> pending_;                      // parameters not yet ready, per bucket
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
  Stopwatch in_flight_;   // since this step's first bucket started
  ExchangeStats stats_;
};

}  // namespace gridtrain
