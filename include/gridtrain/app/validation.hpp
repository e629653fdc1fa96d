// The validation pass: a fixed subset of the validation samples of each dataset
// (Samples::validation: the same on every rank and layout), split over dp, run forward through the pipeline with the model in
// eval mode (batch norm uses its running statistics), the sums counted on the last stage's tp
// rank 0 and summed over the grid.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/data/samples.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/parallel/pipeline_engine.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class Validation {
 public:
  struct Result {
    double loss = 0;                  ///< mean loss, nats per item (token; image); a blend's: Σ weight · dataset's
    std::optional<double> accuracy;   ///< classifiers: top-1 fraction correct
    std::vector<double> per_dataset;  ///< a blend's: each dataset's mean loss (Samples::datasets order); else empty
  };
  /// Picks train.eval_samples samples (all of them, with a note, when there are fewer) and this
  /// dp rank's share. Collective over grid.dp(). samples must outlive this.
  Validation(const Config& c, const Samples& samples, Grid& grid, Log& log);
  /// One pass in micro-batches of micro_batch samples. Collective over the grid.
  Result run(Model& model, PipelineEngine& engine, int micro_batch, torch::Device device) const;
  /// Validation samples per pass.
  std::size_t samples() const { return total_; }

 private:
  struct Subset {
    std::vector<std::uint64_t> mine;  // this dp rank's share
    std::int64_t most = 0;            // the most samples a dp rank has
  };
  /// One dataset's pass: {nats, correct predictions, items} summed over the grid.
  std::array<double, 3> sums(const Subset& subset, Model& model, PipelineEngine& engine, int micro_batch,
                             torch::Device device) const;

  const Samples& samples_;
  Grid& grid_;
  PrecisionType precision_;
  std::vector<Subset> subsets_;  // one per dataset
  std::size_t total_ = 0;
};

}  // namespace gridtrain
