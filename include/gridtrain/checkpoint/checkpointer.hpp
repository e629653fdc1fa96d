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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"
#include "gridtrain/data/corpus_id.hpp"
#include "gridtrain/precision/step_guard.hpp"
#include "gridtrain/util/log.hpp"

namespace gridtrain {

class Grid;
class Model;
class Optimizer;
struct NamedParameter;


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

  bool enabled() const;
  /// Whether a checkpoint is due after `step` steps: into checkpoint.dir (interval, or the last
  /// step) or a local one (checkpoint.local_interval).
  bool due(long long step) const;
  /// The first step after `step` at which one is due, or 0 when none is (checkpoint.dir = none).
  long long next_due(long long step) const;
  /// Saves the state after `step` steps at the levels due: this rank's part into node memory and
  /// its partner's (local_interval), the HDF5 file (interval, the last step, or `stopping`: a run
  /// that stops writes the file, since a requeued job may start on other nodes). sample_index is
  /// the sampler's next global sample index and epoch its epoch. Collective over the grid. I/O
  /// failures of the file are faults on the rank (abort); a local part that cannot be written is
  /// reported and leaves that local step incomplete (a resume passes over it).
  void save(long long step, std::uint64_t sample_index, std::uint64_t epoch, Model& model, Optimizer& opt,
            const TrainState& train = {}, bool stopping = false);
  /// Blocks until an outstanding asynchronous write has finished and is `latest` (end of run).
  void wait();

  /// checkpoint.resume resolved by choose_resume() (checkpoint_dir.hpp): none → nullopt; auto, a
  /// directory or a `latest` pointer → the newest checkpoint of the directory's run that passes
  /// its checksums (never older than the one `latest` names); a file → that file, or in a
  /// requeued or relaunched Slurm job the newest checkpoint its earlier attempt wrote from it.
  /// With checkpoint.local_interval, where that resolution scanned (not a file taken as named),
  /// a newer local step of the same lineage wins: its step directory is returned when every
  /// rank's part of it is found, in its own node's memory or its partner's, and verified (the
  /// levels: docs/checkpoint-format.md, Local levels). Logs which and why, naming each level
  /// passed over. Collective.
  std::optional<std::string> resume_path(Model& model, Optimizer& opt);
  /// Loads path (a file, or the local step resume_path() chose) into model and opt (fp32
  /// master weights, optimizer state, RNG); this run then continues the checkpoint's lineage
  /// from its step (claim_lineage). Collective. Throws gridtrain::Error naming the file and the problem: unreadable/truncated/corrupt file, wrong
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
  /// More state saved as /<group>/<name> and loaded in place (a step fix's: sparsity masks, group
  /// "sparse"): fp32 tensors named "<param>/<what>", each shaped and placed as parameter <param>
  /// or, with a shape and offset, as its ZeRO piece, like the optimizer's state. load() of a file
  /// without /<group> throws gridtrain::Error(missing), naming the file. Call before the first
  /// save or load.
  void add_state(const std::string& group, const std::vector<NamedParameter>& tensors, std::string missing);
  /// A group this run does not keep: load() of a file that has /<group> adds `note` to the resume
  /// message. Call before the first load.
  void ignore_state(const std::string& group, std::string note);

  /// Fault injection (debug.kill_memory): deletes the local parts this rank holds, as the loss
  /// of its node's memory would. Local.
  void drop_local_parts();
  /// The rank that keeps rank's partner copy, or -1 without partner copies. Local.
  int partner_rank(int rank) const;

  int saves() const;        ///< checkpoints into checkpoint.dir
  int local_saves() const;  ///< local steps written
  double local_write_s() const;  ///< time spent writing local parts and partner copies
  double stall_s() const;  ///< step-loop time spent in save()
  double drain_s() const;  ///< time wait() spent for the last write at the end
  double write_s() const;  ///< time spent writing files (background when async)

 private:
  struct Impl;  // checkpoint/checkpointer_impl.hpp: the HDF5 file, tensors, communicators, the writer
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridtrain
