// ZeRO parameter storage over grid.dp() (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", SC'20), beside the gradient Reducer and sharing its
// BucketLayout.
//
// At ZeRO stage >= 1 the parameters become views into flat parameter buckets (as FSDP's flat
// parameters) and dp rank r updates its r-th shard of each (own()).
//  - Stages 1–2: every rank holds every flat parameter whole; after the update all_gather()
//    brings every rank's updated shard to every rank.
//  - Stage 3: the buckets are the model's units (a transformer block, an embedding) and a rank
//    keeps only its shard of each. A unit's flat parameter is allocated and all-gathered just
//    before the unit's forward and again before its backward (ParameterGather, called by the
//    model) and freed after each, so the parameters held whole are the units in use and the next
//    one, whose all-gather is started ahead (prefetch, zero.prefetch). The token embedding of a
//    one-stage model stays gathered from the embedding to the end of backward, since the tied
//    output head uses it in between. The Reducer says when a unit's gradients are complete
//    (ParameterStorage); before a unit's backward this asks the Reducer for its gradient bucket
//    (GradientStorage).
// At stage 0 the parameters are the model's own tensors and every operation is a no-op.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/parallel/bucket_layout.hpp"
#include "gridtrain/parallel/parameter_gather.hpp"
#include "gridtrain/parallel/unit_storage.hpp"

namespace gridtrain {

class ShardedParameters : public ParameterGather, public ParameterStorage {
 public:
  /// params: the model's, in registration order, as layout lays them out (its shards = dp).
  /// stage: the ZeRO stage in effect, 0..3.
  ShardedParameters(std::vector<torch::Tensor> params, std::shared_ptr<const BucketLayout> layout, Axis& dp, int stage,
                    bool prefetch);
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  int stage() const { return stage_; }
  /// Stage >= 1: this rank's part of flat parameter bucket b (its shard), 1-D, updated in place.
  torch::Tensor own(std::size_t b) const;
  /// Stages 1–2: all-gathers every bucket in place after the shards were updated, and waits. A
  /// no-op at stages 0 and 3 (stage 3 gathers each unit when the model next uses it).
  void all_gather();
  /// Stage 3: the Reducer, asked for a unit's gradient bucket before the unit's backward.
  void connect(GradientStorage& gradients) { gradients_ = &gradients; }

  /// Stage 3: whether unit `unit` has parameters here (a parameter group may lack a unit: the
  /// experts' group has only the MoE blocks). False below stage 3.
  bool holds(int unit) const { return stage_ == 3 && layout_->find_unit(unit) >= 0; }
  // ParameterGather (stage 3; no-ops below it).
  void gather(int unit) override;
  torch::Tensor release(int unit, const torch::Tensor& out, bool keep) override;
  // ParameterStorage: stage 3 frees the unit.
  void gradients_complete(std::size_t bucket) override;

  /// Stage 3: all-gathers every unit and waits, so that all parameters hold their values (to
  /// read them whole: tests, tools). A no-op below stage 3.
  void gather_all();
  /// Stage 3: frees every gathered unit (those a failed step left gathered, too). A no-op below
  /// stage 3.
  void release_all();

  /// Bytes this rank holds in parameters now (stage 0: the model's tensors; 1–2: the flat
  /// buckets; 3: the shards and the units gathered), and the most it held at once so far.
  std::uint64_t bytes() const;
  std::uint64_t peak_bytes() const { return peak_; }

 private:
  enum class Held : std::uint8_t { Freed, InFlight, Gathered };  // a stage-3 flat parameter's storage

  void flatten();                      // the parameters become views of flat parameter buckets
  void start_gather(std::size_t b);
  void materialize(std::size_t b);     // gathered when it returns
  void free_unit(std::size_t b);       // waits for an all-gather in flight first
  void prefetch(int unit);             // starts its all-gather if it is freed
  void before_backward(int unit);
  void note_peak();

  std::vector<torch::Tensor> params_;
  std::shared_ptr<const BucketLayout> layout_;
  Axis& dp_;
  int stage_;
  bool prefetch_;
  GradientStorage* gradients_ = nullptr;
  std::vector<torch::Tensor> flat_, shards_;  // flat parameter buckets; stage 3's own shards of them
  std::vector<Held> held_;
  std::vector<Work> gathers_;
  std::uint64_t peak_ = 0;
};

/// ZeRO stage 3: every parameter whole for the guard's lifetime (gather_all), released at its
/// end. P: ShardedParameters, or ParameterGroups (all groups).
template <class P>
class WholeParameters {
 public:
  explicit WholeParameters(P& p) : p_(p) { p_.gather_all(); }
  ~WholeParameters() { p_.release_all(); }
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  P& p_;
};

}  // namespace gridtrain
