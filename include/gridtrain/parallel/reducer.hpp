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
#pragma once
#include <array>
#include <cstdint>
#include <memory>
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

class Reducer {
 public:
  /// params in registration order; bucket_mb > 0 (MiB). A tensor larger than a bucket gets a
  /// bucket of its own. Overlap happens only without compression and with dp > 1.
  Reducer(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap,
          Compression compression = Compression::None);
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
  /// Multiplies every gradient by factor (clipping).
  void scale(double factor);

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

  Axis& dp_;
  bool overlap_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buckets_;            // flat fp32, contiguous
  std::vector<std::size_t> bucket_of_;            // parameter index → bucket
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
