// data.blend: the training windows of several token datasets in Megatron's greedy order
// (data/blend.hpp), each dataset with its own sampler (epochs wrap per dataset, so a tiny one
// with a large weight is reread, not run past); validation per dataset.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/config/data_blend.hpp"
#include "gridtrain/data/blend.hpp"
#include "gridtrain/data/samples.hpp"

namespace gridtrain {

/// The windows of the datasets of c.data.blend; each dataset is loaded as load_token_samples
/// loads data.path, with its own seed. Collective over comm. Throws gridtrain::Error when the
/// datasets disagree on the tokenizer or end-of-document token, and as load_token_samples for each.
class BlendedSamples : public Samples {
 public:
  BlendedSamples(const Config& c, MPI_Comm comm);
  int width() const override { return datasets_.front()->width(); }
  /// The first dataset's, with the largest vocabulary of them all.
  DataShape shape() const override;
  /// Sample g's dataset by the greedy rule, then that dataset's next window. The loader thread's
  /// cursor only moves forward (it reads increasing g).
  void train_row(std::uint64_t g, std::int64_t* out) override;
  /// The furthest epoch any dataset has reached by sample g.
  std::uint64_t epoch(std::uint64_t g) const override;
  /// Dataset `dataset`'s ids, tagged with it in their top 8 bits.
  std::vector<std::uint64_t> validation(int count, int dataset) const override;
  std::vector<DatasetInfo> datasets() const override;
  std::string validation_samples() const override { return datasets_.front()->validation_samples() + " of each dataset"; }
  void val_row(std::uint64_t id, std::int64_t* out) const override;
  std::string describe() const override;
  /// The datasets' sizes summed, SHA-256 of their sha256s, the blend's normalized text.
  CorpusId id() const override;
  /// blend_weights, blend_start (where the current weights began) and blend_base (each dataset's
  /// samples drawn before then).
  DataState state() const override;
  /// The same weights continue where they were; other weights (data.allow_change) start their
  /// greedy order at g, each dataset from the samples it had drawn by then.
  void restore(const DataState& state, std::uint64_t g) override;

 private:
  void check_agreement(const Config& c) const;

  BlendSpec spec_;
  std::vector<std::unique_ptr<Samples>> datasets_;
  std::uint64_t start_ = 0;          // the global sample where the current weights began
  std::vector<std::uint64_t> base_;  // each dataset's samples drawn before start_
  BlendCursor loader_;               // the loader thread's
  mutable BlendCursor main_;         // epoch()'s, on the step loop's thread
  mutable std::mutex main_mutex_;
};

}  // namespace gridtrain
