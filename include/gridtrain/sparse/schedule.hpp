// When masks change and how dense each sparsified tensor is: the schedules of sparsity.method and
// the per-tensor densities of sparsity.distribution. Plain arithmetic, no tensors.
//
//   gmp   Zhu & Gupta 2017, "To prune, or not to prune", eq. (1): s_t = s_f (1 - (1 - (t - t0) / (n Δt))³)
//         for t0 <= t <= t0 + n Δt (here t0 = sparsity.start, t0 + n Δt = end, Δt = interval).
//   set   Mocanu et al. 2018: a constant fraction ζ (sparsity.drop_fraction) of the active weights
//         is dropped and regrown at each mask update.
//   rigl  Evci et al. 2020, "Rigging the Lottery", eq. (1): f_decay(t) = α/2 (1 + cos(π t / T_end)),
//         with t counted from sparsity.start and T_end = end - start.
//   erk   Evci et al. 2020, §3 and their sparse_utils.py: density ε (Σ dims)/(Π dims) per tensor,
//         ε chosen so that the total number of zeros equals the uniform one; a tensor whose density
//         would exceed 1 is kept dense and ε is solved again for the rest.
#pragma once
#include <cstdint>
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain {

/// Final density (fraction of weights kept) of each tensor of the given global shapes, in their
/// order, so that the total fraction of zeros over them is `target` (to rounding): uniform gives
/// 1 - target each; erk as above. Throws std::invalid_argument for an empty list or target
/// outside [0, 1).
std::vector<double> final_densities(SparsityDistribution distribution, double target,
                                    const std::vector<std::vector<std::int64_t>>& shapes);

class SparsitySchedule {
 public:
  SparsitySchedule(const Config::Sparsity& s, int train_steps);
  /// Whether masks change after the update of step t (0-based): start <= t <= end and
  /// (t - start) a multiple of interval, or t = end (gmp reaches its target there).
  bool updates_at(long long t) const;
  /// Whether step t is the first mask update: set and rigl prune to their final densities then.
  bool first_update(long long t) const { return t == start_; }
  /// Density of a tensor whose final density is d_final at step t: gmp follows the cubic from 1
  /// at start to d_final at end; set and rigl hold d_final from start on (1 before it).
  double density(double d_final, long long t) const;
  /// Fraction of the active weights dropped (and regrown) at mask update t > start: set ζ,
  /// rigl α/2 (1 + cos(π (t - start) / (end - start))); 0 for gmp.
  double drop_fraction(long long t) const;
  int start() const { return start_; }
  int end() const { return end_; }
  int interval() const { return interval_; }

 private:
  SparsityMethod method_;
  int start_, end_, interval_;
  double alpha_;
};

}  // namespace gridtrain
