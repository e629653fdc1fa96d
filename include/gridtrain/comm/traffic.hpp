// Bytes sent per grid axis over a step: one record that snapshots every axis's cumulative
// counter (Axis::bytes_sent, where every byte is counted as it is sent) at the step's start and
// takes the difference at its end. Nothing else counts bytes, so the thermo column, the summary's
// per-axis volumes and the bus bandwidth all come from here.
#pragma once
#include <cstdint>
#include <vector>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

class StepTraffic {
 public:
  using Bytes = std::vector<std::uint64_t>;
  /// The axes whose bytes each column adds up (one column per grid axis, in kAxes order; pp: the
  /// pipeline axis and the tied-embedding pair split off it). The axes must outlive the record.
  explicit StepTraffic(std::vector<std::vector<const Axis*>> columns)
      : columns_(std::move(columns)), start_(columns_.size()), total_(columns_.size()) {}

  /// Snapshots every axis's counter: the step starts.
  void begin() { start_ = counters(); }
  /// The bytes sent per column since begin(), which are also added to total().
  Bytes end() {
    Bytes step = counters();
    for (std::size_t c = 0; c < step.size(); ++c) {
      step[c] -= start_[c];
      total_[c] += step[c];
    }
    return step;
  }
  /// Every step's bytes per column since construction.
  const Bytes& total() const { return total_; }

 private:
  Bytes counters() const {
    auto b = Bytes(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c)
      for (const Axis* a : columns_[c]) b[c] += a->bytes_sent();
    return b;
  }
  std::vector<std::vector<const Axis*>> columns_;
  Bytes start_, total_;
};

}  // namespace gridtrain
