// Megatron's greedy blending of datasets (megatron/core/datasets/helpers.cpp,
// build_blending_indices): sample j of the blend goes to the dataset i with the largest
// w_i·max(j, 1) − c_i, c_i the samples i has had before j (the first such i on a tie). Each
// dataset's count then stays within one sample of w_i·j, and the sequence is a function of the
// weights alone, so the batch of step s stays a function of (seed, s) at every layout.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace gridtrain {

class BlendCursor {
 public:
  /// weights: normalized, one per dataset. Starts at sample 0 with no sample drawn.
  explicit BlendCursor(std::vector<double> weights);
  /// Sample position() → {its dataset, that dataset's count before it}; then the next sample.
  std::pair<int, std::uint64_t> next();
  /// Moves to sample j: forward by drawing, backward by starting again from 0.
  void seek(std::uint64_t j);
  std::uint64_t position() const { return j_; }
  /// Samples each dataset has had before position().
  const std::vector<std::uint64_t>& counts() const { return counts_; }

 private:
  std::vector<double> weights_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t j_ = 0;
};

}  // namespace gridtrain
