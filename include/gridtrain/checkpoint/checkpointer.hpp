// Checkpoints of a training run: what goes into the file, when, where, and how it is made atomic.
//
// save(): snapshot → write step-XXXXXXXX.h5.tmp collectively → flush, close on all ranks →
// rank 0 renames it to step-XXXXXXXX.h5, then atomically replaces `latest` (write latest.tmp,
// fsync, rename) and deletes checkpoints beyond checkpoint.keep_last. A crash at any point leaves
// the previous checkpoint as `latest`. With checkpoint.async the write runs on a background
// thread over its own communicator (needs MPI_THREAD_MULTIPLE); the step loop pays only for the
// copy into the host snapshot, and a new save (or the end of the run) waits for the previous one.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <mpi.h>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class Optimizer;
class Grid;
struct Snapshot;

/// Format version written into and required from checkpoint files.
inline constexpr int kCheckpointVersion = 1;

/// Replicated step-loop state (loss scaler, skip counters, outlier windows) by name: fp64
/// attributes of the group /train, the same on every rank.
using TrainState = std::vector<std::pair<std::string, std::vector<double>>>;

/// Where training continues after a load.
struct ResumePoint {
  long long step = 0;              ///< optimizer steps completed
  std::uint64_t sample_index = 0;  ///< next global sample index of the sampler
  TrainState train;                ///< what save() was given (empty for a file without /train)
};

class Checkpointer {
 public:
  /// Collective over the grid. Throws gridtrain::Error when checkpoint.async is requested but MPI
  /// does not provide MPI_THREAD_MULTIPLE.
  Checkpointer(const Config& cfg, Grid& grid, Log& log);
  ~Checkpointer();

  bool enabled() const { return cfg_.checkpoint.dir != "none"; }
  /// Whether a checkpoint is due after `step` steps (interval, or the last step).
  bool due(long long step) const;
  /// Saves the state after `step` steps; sample_index is the sampler's next global sample index
  /// and epoch its epoch. Collective over the grid. I/O failures are faults on the rank (abort).
  void save(long long step, std::uint64_t sample_index, std::uint64_t epoch, LanguageModel& model, Optimizer& opt,
            const TrainState& train = {});
  /// Blocks until an outstanding asynchronous write has finished and is `latest` (end of run).
  void wait();

  /// checkpoint.resume resolved: none → nullopt; auto → `latest` if present; else the path.
  /// Logs which. Collective (rank 0 looks, everyone learns).
  std::optional<std::string> resume_path();
  /// Loads path into model and opt (fp32 master weights, optimizer state, RNG). Collective.
  /// Throws gridtrain::Error naming the file and the problem: unreadable/truncated/corrupt file,
  /// wrong format or version, a tensor whose shape differs, a different optimizer type.
  ResumePoint load(const std::string& path, LanguageModel& model, Optimizer& opt);

  int saves() const { return saves_; }
  double stall_s() const { return stall_s_; }  ///< step-loop time spent in save()
  double drain_s() const { return drain_s_; }  ///< time wait() spent for the last write at the end
  double write_s() const { return write_s_; }  ///< time spent writing files (background when async)

 private:
  struct Entry {
    std::string name;             // dataset, e.g. /model/h.0.attn.c_attn.weight
    std::vector<hsize_t> shape;   // global
    torch::Tensor local;          // undefined where this rank does not hold the tensor
    ShardSpec spec;
  };
  const std::vector<Entry>& entries(LanguageModel& model, Optimizer& opt);
  bool writes(const Entry& e) const;  // this rank's slab is the one written (and checksummed)
  Slab slab_of(const Entry& e) const;
  void write(const Snapshot& snap);  // collective over io_comm_, then commit on rank 0
  void join_writer();
  std::string file_name(long long step) const;

  Config cfg_;
  Grid& grid_;
  Log& log_;
  MPI_Comm io_comm_ = MPI_COMM_NULL;  // dup of the grid communicator, used by the writer
  std::thread writer_;
  std::shared_ptr<Snapshot> pending_;  // the last snapshot (its buffers are reused)
  std::vector<Entry> entries_;         // the datasets of model and optimizer (first save or load)
  int saves_ = 0;
  double stall_s_ = 0, drain_s_ = 0, write_s_ = 0;
};

}  // namespace gridtrain
