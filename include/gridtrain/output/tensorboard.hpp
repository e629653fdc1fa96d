// TensorBoard event files (output.tensorboard): scalars as TensorFlow's tf.summary writes them,
// so that `tensorboard --logdir OUTPUT_DIR` shows a run's curves while it goes, from files (a
// compute node needs no service).
//
// Format: a file named events.out.tfevents.<unix time>.<host>.gridtrain holds TFRecords (uint64
// length, masked CRC-32C of the length, the data, masked CRC-32C of the data; little endian),
// each the serialized protobuf of a tensorflow.Event: the first {wall_time, file_version =
// "brain.Event:2"}, then {wall_time, step, summary {value {tag, simple_value}...}}. The protobuf
// fields are few and fixed, so they are encoded here (a protobuf runtime beside LibTorch's own
// would be a second copy of one library); the CRC is Boost.CRC's. tests/regression/tensorboard.sh
// reads the files back with the tensorboard package's own reader.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace gridtrain {

/// One step's scalars by tag.
using Scalars = std::vector<std::pair<std::string, double>>;

class TensorBoardWriter {
 public:
  /// Writes into dir (created if missing). A run that starts after `start_step` steps (a resume)
  /// keeps the events of steps <= start_step from the event files already in dir, in one new file,
  /// and drops the later ones (written after the checkpoint it resumes from), as metrics.jsonl
  /// does, so that each tag has one curve without repeated steps; a fresh run (0) removes them.
  /// A truncated last record (a crash in the middle of a write) is dropped; `note` receives what
  /// was dropped. Throws std::runtime_error naming the file when one cannot be read or written.
  TensorBoardWriter(const std::string& dir, long long start_step, std::string* note = nullptr);
  /// Appends one event with every scalar of `step` (fp32 values, as simple_value) and flushes it,
  /// so that a reader sees it at once.
  void write(long long step, const Scalars& scalars);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

/// TFRecord framing of one record (exposed for tests).
std::string tfrecord(const std::string& data);
/// The masked CRC-32C (Castagnoli) TFRecord stores: ((c >> 15) | (c << 17)) + 0xa282ead8.
std::uint32_t masked_crc32c(const void* data, std::size_t n);

}  // namespace gridtrain
