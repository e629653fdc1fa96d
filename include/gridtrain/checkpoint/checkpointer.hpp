// Checkpoints of a training run: what goes into the file, when, where, and how it is made atomic.
//
// save(): snapshot → write step-XXXXXXXX.h5.tmp collectively → flush, close on all ranks →
// rank 0 renames it to step-XXXXXXXX.h5, then atomically replaces `latest` (write latest.tmp,
// fsync, rename) and deletes this run's checkpoints beyond checkpoint.keep_last. A crash at any
// point leaves the previous checkpoint as `latest`. With checkpoint.async the write runs on a
// background thread over its own communicators (needs MPI_THREAD_MULTIPLE); the step loop pays
// only for the copy into the host snapshot, and a new save (or the end of the run) waits for the
// previous one.
//
// Every collective phase of a write (create, each dataset, attributes, flush, close, commit) ends
// with all ranks agreeing on success under comm.timeout_s before the next one starts; a watchdog
// aborts a phase stuck inside HDF5's own collectives past that deadline. A failure
// anywhere (a full disk, EIO, EACCES) aborts the job with the first failing rank's message naming
// the file, the phase or dataset and the OS error, after removing the .tmp: its peers may be
// inside the collective HDF5 call that failed and could not leave it otherwise. Loading is phased
// the same way: a problem every rank sees is a gridtrain::Error, one rank's fault aborts.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mpi.h>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/data/corpus_id.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/precision/step_guard.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/log.hpp"
#include "gridtrain/util/watchdog.hpp"

namespace gridtrain {

class Grid;
struct Snapshot;


/// The run a checkpoint belongs to (docs/checkpoint-format.md, Lineages).
struct Lineage {
  std::string run_id;         ///< 16 hex digits
  std::string branched_from;  ///< "<run_id>@<step>" of the checkpoint a branch started from, or ""
};

/// Where training continues after a load.
struct ResumePoint {
  long long step = 0;              ///< optimizer steps completed
  std::uint64_t sample_index = 0;  ///< next global sample index of the sampler
  TrainState train;                ///< what save() was given (empty for a file without /train)
};

class Checkpointer {
 public:
  /// Collective over the grid. Throws gridtrain::Error when checkpoint.dir exists and is no
  /// directory or cannot be written (found by writing a probe file), or when checkpoint.async is
  /// requested but MPI does not provide MPI_THREAD_MULTIPLE. Removes step-*.h5.tmp files there
  /// (writes a crash interrupted).
  Checkpointer(const Config& cfg, Grid& grid, Log& log, CorpusId corpus);
  ~Checkpointer();

  bool enabled() const { return cfg_.checkpoint.enabled(); }
  /// Whether a checkpoint is due after `step` steps (interval, or the last step).
  bool due(long long step) const;
  /// The first step after `step` at which one is due, or 0 when none is (checkpoint.dir = none).
  long long next_due(long long step) const;
  /// Saves the state after `step` steps; sample_index is the sampler's next global sample index
  /// and epoch its epoch. Collective over the grid. I/O failures are faults on the rank (abort).
  void save(long long step, std::uint64_t sample_index, std::uint64_t epoch, Model& model, Optimizer& opt,
            const TrainState& train = {});
  /// Blocks until an outstanding asynchronous write has finished and is `latest` (end of run).
  void wait();

  /// checkpoint.resume resolved by choose_resume() (checkpoint_dir.hpp): none → nullopt; auto, a
  /// directory or a `latest` pointer → the newest checkpoint of the directory's run that passes
  /// its checksums (never older than the one `latest` names); a file → that file, or in a
  /// requeued Slurm job the newest checkpoint its earlier attempt wrote from it. Logs which and
  /// why. Collective.
  std::optional<std::string> resume_path();
  /// Loads path into model and opt (fp32 master weights, optimizer state, RNG); this run then
  /// continues the checkpoint's lineage from its step (claim_lineage). Collective. Throws
  /// gridtrain::Error naming the file and the problem: unreadable/truncated/corrupt file, wrong
  /// format or version, a tensor whose shape differs, a different optimizer type or seed, a
  /// different corpus (unless data.allow_change), or checkpoint.dir files of another lineage this
  /// run would replace. A read that fails on some ranks only aborts the job (see above).
  ResumePoint load(const std::string& path, Model& model, Optimizer& opt);
  /// Loads only the weights of path into model (checkpoint.init_from), whatever layout or
  /// optimizer wrote it; opt's state stays as it is (fresh). Collective. Throws gridtrain::Error naming the file for the problems
  /// load() names and for a file whose model tensors are not exactly the model's (one missing, one
  /// the model lacks: another model type or size).
  void load_weights(const std::string& path, Model& model, Optimizer& opt);

  /// ZeRO stage 3: the parameters are saved from and loaded into this rank's pieces of them (as
  /// the optimizer holds them), each writing and reading its own; the whole parameters are never
  /// gathered. Call before the first save or load.
  void use_parameter_pieces(const std::vector<NamedParameter>& pieces);
  /// More state saved as /<group>/<name> and loaded in place (sparsity masks, group "sparse"):
  /// fp32 tensors named "<param>/<what>", each shaped and placed as parameter <param> or, with a
  /// shape and offset, as its ZeRO piece, like the optimizer's state. Call before the first save
  /// or load.
  void add_state(const std::string& group, const std::vector<NamedParameter>& tensors);

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
    // A ZeRO piece (optimizer state; stage 3's parameters): local is elements [offset, ...) of
    // the flattened tp-local tensor of shape local_shape (empty: local is the whole tp-local
    // tensor). Every dp rank writes and reads its own piece.
    std::vector<std::int64_t> local_shape = {};
    std::int64_t offset = 0;
    bool piece() const { return !local_shape.empty(); }
  };
  const std::vector<Entry>& entries(Model& model, Optimizer& opt);
  bool writes(const Entry& e) const;  // this rank's selection is one written (and checksummed)
  /// Where this rank's part of e lies in its dataset: its tp slab, or for a piece the
  /// rectangles of that slab it covers; empty where the rank holds nothing of e.
  Selection selection_of(const Entry& e) const;
  /// The first n elements of local, row-major: what a selection of n elements holds (padding rows
  /// come last).
  static torch::Tensor leading(const torch::Tensor& local, std::size_t n);
  void write(const Snapshot& snap);  // collective over io_comm_, then commit on rank 0
  void launch(const std::shared_ptr<Snapshot>& snap);  // write it, on the writer thread when async
  /// Runs fn and agrees on its success over agree_comm_ under comm.timeout_s, watched by the
  /// watchdog; a rank that does not get past it in time aborts the job with `where` and what
  /// abandon(stuck = true) (cleanup, returning text to add) says. Returns the agreed failure.
  std::optional<Failure> phase(const std::string& where, const std::function<void()>& fn,
                               const std::function<std::string(bool stuck)>& abandon);
  /// The lowest failing rank aborts the job with message(); the others wait for it, then abort.
  [[noreturn]] void abort_from(const Failure& failure, const std::function<std::string()>& message);
  /// Runs one collective phase of a write and agrees on its success over agree_comm_; on a
  /// failure anywhere the job is aborted (see above). Returns only when every rank succeeded.
  void write_phase(const Snapshot& snap, const std::string& what, const std::function<void()>& fn);
  /// The same for a load: a failure on every rank throws gridtrain::Error, on some ranks aborts.
  void read_phase(const std::string& path, const std::string& what, const std::function<void()>& fn);
  /// load()'s parts: the root, /optim, /data and /train attributes into `at` (returns a note
  /// for the log), the corpus check, the per-rank state (true when residuals were reset).
  std::string read_header(CheckpointFile& file, Optimizer& opt, ResumePoint& at);
  std::string check_corpus(hid_t data) const;
  bool read_rank_state(CheckpointFile& file, Optimizer& opt);
  /// Reads the tensors of file into this rank's parts of them (phased as load()).
  void read_tensors(const std::string& path, CheckpointFile& file, const std::vector<Entry>& tensors);
  /// After a load: the lineage (run_id) this run continues. The loaded run's (with its
  /// branched_from, when the loaded file is a branch's), unless checkpoint.dir holds a later
  /// checkpoint of that run which resume_path() did not choose over (a directory scan passed it
  /// over as unusable, or a requeue continues its own lineage): then this run is a branch and gets
  /// a new run_id (its files record branched_from). Throws gridtrain::Error, before any step,
  /// when a step file this run would write belongs to another run (or the branched-from one),
  /// naming each file's run, unless output.overwrite = true.
  void claim_lineage(bool scanned);
  /// Deletes this run's checkpoints older than `step` beyond checkpoint.keep_last (rank 0).
  void prune(long long step);
  void join_writer();
  std::string file_name(long long step) const;

  Config cfg_;
  Grid& grid_;
  Log& log_;
  CorpusId corpus_;
  Lineage lineage_;  // new at a fresh start or a branch, the checkpoint's after a load
  std::string slurm_job_;  // slurm_job_identity() of rank 0, written into every file ("" outside Slurm)
  bool resume_scanned_ = false;  // resume_path() chose from a directory's files
  std::string resume_file_;      // the checkpoint resume_path() chose ("" when none)
  long long start_step_ = 0;  // the step this run started from (that of the loaded checkpoint)
  std::set<long long> written_;  // steps this process committed (touched by the writer only)
  MPI_Comm io_comm_ = MPI_COMM_NULL;     // dup of the grid communicator: the HDF5 file's
  MPI_Comm agree_comm_ = MPI_COMM_NULL;  // another: the phases' agreements, never mixed with HDF5's
  Watchdog watchdog_;                    // each phase's deadline (comm.timeout_s)
  std::thread writer_;
  std::shared_ptr<Snapshot> pending_;  // the last snapshot (its buffers are reused)
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, NamedParameter>> extra_state_;  // add_state's, by dataset name
  std::map<std::string, NamedParameter> parameter_pieces_;  // ZeRO stage 3, by parameter name         // the datasets of model and optimizer (first save or load)
  int saves_ = 0;
  double stall_s_ = 0, drain_s_ = 0, write_s_ = 0;
};

}  // namespace gridtrain
