// Bytes sent per grid axis over a step: one record that snapshots every axis's cumulative
// counter (Axis::bytes_sent, where every byte is counted as it is sent) at the step's start and
// takes the difference at its end. Nothing else counts bytes, so the thermo column, the summary's
// per-axis volumes and the bus bandwidth all come from here.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class StepTraffic {
 public:
  enum Column { Dp, Tp, Pp, kColumns };
  using Bytes = std::array<std::uint64_t, kColumns>;
  /// The axes whose bytes each column adds up (pp: the pipeline axis and the tied-embedding pair
  /// split off it). The axes must outlive the record.
  explicit StepTraffic(std::array<std::vector<const Axis*>, kColumns> axes) : axes_(std::move(axes)) {}

  /// Snapshots every axis's counter: the step starts.
  void begin() { start_ = counters(); }
  /// The bytes sent per column since begin(), which are also added to total().
  Bytes end() {
    const Bytes now = counters();
    Bytes step{};
    for (int c = 0; c < kColumns; ++c) {
      step[c] = now[c] - start_[c];
      total_[c] += step[c];
    }
    return step;
  }
  /// Every step's bytes per column since construction.
  const Bytes& total() const { return total_; }

 private:
  Bytes counters() const {
    Bytes b{};
    for (int c = 0; c < kColumns; ++c)
      for (const Axis* a : axes_[c]) b[c] += a->bytes_sent();
    return b;
  }
  std::array<std::vector<const Axis*>, kColumns> axes_;
  Bytes start_{}, total_{};
};

}  // namespace gridtrain
