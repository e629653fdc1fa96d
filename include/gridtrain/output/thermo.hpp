// Thermo output (rank 0): a header row once, then one fixed-width line every output.thermo steps,
// mirrored as one JSON object per line into <output.dir>/metrics.jsonl.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "gridtrain/util/log.hpp"

namespace gridtrain {

struct ThermoRow {
  long long step;                  ///< optimizer steps completed
  double loss;                     ///< mean training loss of this step over the global batch, nats/token
  std::optional<double> val_loss;  ///< validation loss when computed at this step, nats/item
  std::optional<double> val_accuracy;  ///< classifiers: top-1 validation accuracy when computed
  double lr;                       ///< learning rate used by this step
  double grad_norm;                ///< global L2 norm before clipping
  double items_per_s;             ///< global items (tokens; images) per second over the interval
  double step_ms;                  ///< wall ms per step over the interval (evaluation excluded)
  double mfu;                      ///< model FLOPs utilization, fraction of peak
  std::uint64_t comm_bytes;        ///< bytes this rank sent on the dp axis in this step (gradients
                                   ///< and, for 1-bit Adam, its compressed momentum exchange)
  double loss_scale = 1.0;         ///< dynamic loss scale after this step (1 without scaling)
  long long skipped = 0;           ///< updates skipped so far (non-finite or outlier steps)
};

class Thermo {
 public:
  /// metrics_path: metrics.jsonl (opened only when log is active, i.e. on rank 0). A run that
  /// starts after `start_step` steps (a resume) keeps the file's lines of steps <= start_step and
  /// drops the later ones, written after the checkpoint it resumes from (saying so), so that a
  /// reader finds one line per step; a fresh run (0) starts the file empty. Throws
  /// std::runtime_error naming the file if it cannot be read or written.
  /// item: what the rate counts ("token": column Tok/s, key tokens_per_s; "image": Img/s,
  /// images_per_s); accuracy: a ValAcc column and val_accuracy key (classifiers).
  Thermo(Log& log, const std::string& metrics_path, long long start_step, const std::string& item = "token",
         bool accuracy = false);
  void write(const ThermoRow& row);

 private:
  Log& log_;
  std::ofstream jsonl_;
  bool header_done_ = false;
  std::string rate_header_, rate_key_;
  bool accuracy_;
};

}  // namespace gridtrain
