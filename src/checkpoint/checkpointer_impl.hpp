// Checkpointer's private implementation (the pimpl of checkpoint/checkpointer.hpp): what a
// checkpoint holds of the live state (Entry), the phases of a write and a read over HDF5 and
// MPI-IO, the writer thread and the lineage. Shared by checkpointer.cpp (save) and
// checkpointer_load.cpp (resume, load); nothing outside checkpoint/ includes it.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include <mpi.h>
#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpoint_dir.hpp"
#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/checkpoint/local_part.hpp"
#include "gridtrain/checkpoint/tokenizer_record.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/sampler.hpp"  // kSampleOrder, which /data records
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/parallel/shard.hpp"
#include "gridtrain/util/watchdog.hpp"

namespace gridtrain {

struct Snapshot;

struct Checkpointer::Impl {
  // The public operations, as checkpointer.hpp documents them.
  Impl(const Config& cfg, Grid& grid, Log& log, CorpusId corpus);
  ~Impl();
  bool enabled() const { return cfg_.checkpoint.enabled(); }
  bool due(long long step) const;
  long long next_due(long long step) const;
  void save(long long step, std::uint64_t sample_index, std::uint64_t epoch, Model& model, Optimizer& opt,
            const TrainState& train, bool stopping);
  void wait();
  std::optional<std::string> resume_path(Model& model, Optimizer& opt);
  ResumePoint load(const std::string& path, Model& model, Optimizer& opt);
  void load_weights(const std::string& path, Model& model, Optimizer& opt);
  void use_parameter_pieces(const std::vector<NamedParameter>& pieces);
  void add_state(const std::string& group, const std::vector<NamedParameter>& tensors, std::string missing);
  void ignore_state(const std::string& group, std::string note);

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
  bool file_due(long long step) const;  // a checkpoint into checkpoint.dir is due after step
  /// save()'s copy of the tensors each rank writes into the file (Snapshot::tensors).
  void snapshot_files(Snapshot& snap, Model& model, Optimizer& opt);
  void write(const Snapshot& snap);  // collective over io_comm_, then commit on rank 0
  /// Writes snap's levels (local, then the file), on the writer thread when async.
  void launch(const std::shared_ptr<Snapshot>& snap, bool local, bool files);
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
  /// The tokenizer that /tokenizer carries on from a loaded file (resume: true for load(), false
  /// for load_weights()). Data that records none (a Megatron dataset) takes the file's, so that
  /// generate and export still know the model's tokens; data that records one must record the
  /// file's (checked for load_weights; a resume's check_corpus compares the corpus), since the
  /// same ids would otherwise be other tokens: gridtrain::Error naming both. Returns a note for
  /// the log when the file's is taken ("" otherwise).
  std::string inherit_tokenizer(const CheckpointFile& file, bool resume);
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

  // The local levels (checkpointer_local.cpp, checkpointer_local_load.cpp; local_part.hpp): each
  // rank's part in node memory and its partner's copy of it, every checkpoint.local_interval steps.
  bool local_enabled() const { return cfg_.checkpoint.local_interval > 0; }
  bool local_due(long long step) const;
  /// Where ranks sit: node_comm_, node_of_, ranks_per_node_ and whether partner copies are kept
  /// (they are not where a rank's partner shares its node). Collective; logs what it decided.
  void place_ranks();
  /// What a part must share with this run to be restored into it: the grid, every tensor's name
  /// and global shape, the ZeRO stage, the seed, the optimizer and the corpus (a digest).
  std::string fingerprint(Model& model, Optimizer& opt);  // computed once: fingerprint_
  /// save()'s copy of this rank's whole state into local_image_ (the stall of a local level).
  void snapshot_local(const Snapshot& snap, Model& model, Optimizer& opt);
  /// Writes local_image_ as this rank's own part, exchanges it with the partners and keeps the
  /// copy it receives, then deletes this rank's files of older local steps (writer thread).
  void write_local(const Snapshot& snap);
  void prune_local(const std::string& run_id);
  void drop_local_parts();  // Checkpointer::drop_local_parts
  /// The newest local step, of the lineage the resume resolution continues (fs: its choice),
  /// for which every rank's part is at some level and verified, if newer than fs; logs why not
  /// otherwise. Collective.
  std::optional<std::string> choose_local(const std::optional<ResumeChoice>& fs, Model& model, Optimizer& opt);
  /// Restores local_choice_ into model and opt (each part read where it is and sent to its rank).
  ResumePoint load_local(Model& model, Optimizer& opt);
  void restore_part(const PartImage& part, const std::vector<Entry>& tensors, Optimizer& opt);

  Config cfg_;
  Grid& grid_;
  Log& log_;
  CorpusId corpus_;
  // What /tokenizer carries: the corpus's, or inherit_tokenizer's. Settled by load()/load_weights()
  // before the first save, so the writer thread reads it without a lock.
  std::optional<TokenizerRecord> tokenizer_;
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
  std::vector<Entry> entries_;  // the datasets of model and optimizer (first save or load)
  std::vector<std::pair<std::string, NamedParameter>> extra_state_;  // add_state's, by dataset name
  std::map<std::string, std::string> state_missing_;  // add_state's groups: the error for a file without one
  std::map<std::string, std::string> state_unused_;   // ignore_state's groups: the note for a file with one
  std::map<std::string, NamedParameter> parameter_pieces_;  // ZeRO stage 3, by parameter name
  int saves_ = 0, local_saves_ = 0;
  double stall_s_ = 0, drain_s_ = 0, write_s_ = 0, local_write_s_ = 0;

  MPI_Comm local_comm_ = MPI_COMM_NULL;  // dup of the grid communicator: the partner exchange, the local phases
  MPI_Comm node_comm_ = MPI_COMM_NULL;   // the ranks that share this rank's node (and its local_dir)
  std::vector<int> node_of_;             // each world rank's node (the lowest world rank on it)
  int ranks_per_node_ = 1;
  bool partner_ = false;                 // partner copies are written
  std::filesystem::path local_dir_;      // checkpoint.local_dir resolved
  std::string fingerprint_;
  std::string checkpoint_dir_;           // checkpoint.dir, absolute: the parts record whose lineage they are
  PartImage local_image_, held_image_;   // this rank's part; the part it keeps for its partner
  std::vector<long long> local_written_;  // local steps this process wrote, oldest first
  struct LocalSource {                   // where one rank's part of the chosen local step is read
    std::string path;
    int reader = -1;  // the world rank that reads the file (on the file's node)
    std::size_t bytes = 0;
  };
  std::string local_choice_;             // the local step directory resume_path() chose ("" when none)
  std::vector<LocalSource> local_sources_;  // by owner rank
};

}  // namespace gridtrain
