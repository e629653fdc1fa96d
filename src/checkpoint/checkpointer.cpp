#include "checkpointer_impl.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpoint_dir.hpp"
#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/files.hpp"
#include "gridtrain/util/timer.hpp"
#include "gridtrain/version.hpp"

namespace fs = std::filesystem;

namespace gridtrain {

// Everything one checkpoint file holds, copied out of the live state so that training can go on
// while it is written. Ranks that write nothing of a tensor hold no bytes for it.
struct Snapshot {
  struct Tensor {
    std::string name;
    DType type;
    std::vector<hsize_t> shape;
    Selection selection;
    std::vector<unsigned char> bytes;
  };
  long long step = 0;
  std::uint64_t sample_index = 0, epoch = 0;
  std::uint64_t items_seen = 0;  // tokens (or images) trained on
  std::string optim_type;
  long long optim_steps = 0;
  TrainState train;
  std::vector<Tensor> tensors;
  Lineage lineage;
  std::string slurm_job;  // the Slurm job writing it (slurm_job_identity(), rank 0's), "" outside Slurm
  std::string tmp_path, final_path;
  // What the commit phase found (rank 0), for the message of a write abandoned there: whether
  // final_path is this run's file now, whose file already sat there ("" if none, or ours), and
  // where this run's complete file was kept instead then.
  mutable bool committed = false;
  mutable std::string theirs, kept;
};

namespace {

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

// A new run's id, the same on every rank: 64 random bits, enough to tell two runs' files apart.
std::string new_run_id(MPI_Comm comm) { return broadcast_text(random_run_id(), comm); }

}  // namespace

Checkpointer::Impl::Impl(const Config& cfg, Grid& grid, Log& log, CorpusId corpus)
    : cfg_(cfg), grid_(grid), log_(log), corpus_(std::move(corpus)), lineage_{new_run_id(grid.comm()), ""},
      slurm_job_(broadcast_text(slurm_job_identity(), grid.comm())) {  // attributes are collective: rank 0's
  if (!corpus_.tokenizer_model.empty()) tokenizer_ = TokenizerRecord{corpus_.tokenizer, corpus_.tokenizer_model};
  if (enabled()) {
    agree(grid.comm(), [&] {
      if (grid.rank() != 0) return;
      const fs::path dir(cfg.checkpoint.dir);
      const std::string where = "checkpoint.dir = " + cfg.checkpoint.dir;
      if (fs::exists(dir) && !fs::is_directory(dir))
        throw Error(where + " exists and is not a directory; valid: a directory (created if missing) or none");
      std::error_code ec;
      fs::create_directories(dir, ec);
      // Found now, not after the first checkpoint.interval steps of training.
      const int code = ec ? ec.value() : probe_write(dir);
      if (code != 0)
        throw Error(where + " cannot be written (" + std::strerror(code) + "); valid: a writable directory, or none");
      // A step-*.h5.tmp is a write that a crash interrupted; it never became `latest`.
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().starts_with("step-") && e.path().extension() == ".tmp") {
          log.print("Checkpoints: removing " + e.path().string() + " (an interrupted write)\n");
          fs::remove(e.path());
        }
    });
  }
  MPI_Comm_dup(grid.comm(), &io_comm_);
  MPI_Comm_dup(grid.comm(), &agree_comm_);
  if (local_enabled()) place_ranks();
  if (cfg.checkpoint.async) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error("checkpoint.async = true needs an MPI library with MPI_THREAD_MULTIPLE support (this one "
                  "provides level " + std::to_string(provided) + "); set checkpoint.async = false");
  }
}

Checkpointer::Impl::~Impl() {
  if (writer_.joinable()) writer_.join();
  for (MPI_Comm* c : {&local_comm_, &node_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  MPI_Comm_free(&agree_comm_);
  MPI_Comm_free(&io_comm_);
}

bool Checkpointer::Impl::file_due(long long step) const {
  if (!enabled()) return false;
  return step == cfg_.train.steps || (cfg_.checkpoint.interval > 0 && step % cfg_.checkpoint.interval == 0);
}

bool Checkpointer::Impl::due(long long step) const { return file_due(step) || local_due(step); }

long long Checkpointer::Impl::next_due(long long step) const {
  if (!enabled() || step >= cfg_.train.steps) return 0;
  const long long every = cfg_.checkpoint.interval;
  const long long last = cfg_.train.steps;
  return every > 0 ? std::min((step / every + 1) * every, last) : last;
}

std::string Checkpointer::Impl::file_name(long long step) const {
  return (fs::path(cfg_.checkpoint.dir) / checkpoint_name(step)).string();
}

// Every model and optimizer tensor of the whole grid, by dataset name (sorted; the same list on
// every rank, since collective HDF5 calls must match), with this rank's local tensor where it
// holds one. Collective the first time (each rank contributes the names and global shapes it
// knows); the model and optimizer keep their tensors, so later calls reuse the list.
const std::vector<Checkpointer::Impl::Entry>& Checkpointer::Impl::entries(Model& model, Optimizer& opt) {
  if (!entries_.empty()) return entries_;
  std::map<std::string, Entry> all;
  for (const auto& p : model.named_parameters(true)) {
    const auto spec = model.shard(p.key());
    Entry e{{}, {spec.global_shape.begin(), spec.global_shape.end()}, p.value(), spec};
    if (const auto it = parameter_pieces_.find(p.key()); it != parameter_pieces_.end())
      e.local = it->second.param, e.local_shape = it->second.shape, e.offset = it->second.offset;
    all["/model/" + p.key()] = e;
  }
  for (const auto& [name, t] : model.kept_state()) {  // batch-norm running statistics, expert biases
    const auto spec = model.shard(name);
    all["/model/" + name] = {{}, {spec.global_shape.begin(), spec.global_shape.end()}, t, spec};
  }
  auto add = [&](const std::string& dataset, const NamedParameter& st) {
    const auto spec = model.shard(st.name.substr(0, st.name.find('/')));  // "<param>/<state>"
    all[dataset] = {{}, {spec.global_shape.begin(), spec.global_shape.end()}, st.param, spec, st.shape, st.offset};
  };
  for (const auto& st : opt.state()) add("/optim/" + st.name, st);
  for (const auto& [dataset, st] : extra_state_) add(dataset, st);
  std::string mine;
  for (const auto& [name, e] : all) {
    mine += name;
    for (auto d : e.shape) (mine += ' ') += std::to_string(d);
    mine += "\n";
  }
  std::string everyone;
  for (const auto& text : grid_.world().blocking_gather_text(mine, "checkpoint dataset names")) everyone += text;
  std::istringstream lines(everyone);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Entry e;
    fields >> e.name;
    for (hsize_t d; fields >> d;) e.shape.push_back(d);
    all.try_emplace(e.name, e);  // a tensor this rank does not hold
  }
  for (auto& [name, e] : all) {
    e.name = name;
    entries_.push_back(std::move(e));
  }
  return entries_;
}

void Checkpointer::Impl::use_parameter_pieces(const std::vector<NamedParameter>& pieces) {
  for (const auto& p : pieces) parameter_pieces_[p.name] = p;
}

void Checkpointer::Impl::add_state(const std::string& group, const std::vector<NamedParameter>& tensors,
                                   std::string missing) {
  for (const auto& t : tensors) extra_state_.emplace_back("/" + group + "/" + t.name, t);
  state_missing_[group] = std::move(missing);
}

void Checkpointer::Impl::ignore_state(const std::string& group, std::string note) {
  state_unused_[group] = std::move(note);
}

void Checkpointer::Impl::save(long long step, std::uint64_t sample_index, std::uint64_t epoch, Model& model,
                        Optimizer& opt, const TrainState& train, bool stopping) {
  const Stopwatch clock;
  join_writer();  // one write in flight at a time
  // Reuse the previous snapshot's buffers: after the first save, the copy allocates nothing.
  auto snap = pending_ ? pending_ : std::make_shared<Snapshot>();
  snap->step = step;
  snap->sample_index = sample_index;
  snap->items_seen = sample_index * static_cast<std::uint64_t>(model.plan().items_per_sample());
  snap->train = train;
  snap->epoch = epoch;
  snap->optim_type = name_of(opt.type());
  snap->optim_steps = opt.steps();
  snap->lineage = lineage_;
  snap->slurm_job = slurm_job_;
  snap->committed = false;
  snap->theirs.clear();
  snap->final_path = file_name(step);
  snap->tmp_path = snap->final_path + ".tmp";
  // A run that stops writes checkpoint.dir: a requeued job may start on other nodes.
  const bool local = local_due(step), files = enabled() && (stopping || file_due(step));
  if (local) snapshot_local(*snap, model, opt);
  if (files) snapshot_files(*snap, model, opt);
  launch(snap, local, files);
  stall_s_ += clock.seconds();
}

void Checkpointer::Impl::snapshot_files(Snapshot& snap, Model& model, Optimizer& opt) {
  std::size_t count = 0;
  auto slot = [&]() -> Snapshot::Tensor& {
    if (count == snap.tensors.size()) snap.tensors.emplace_back();
    return snap.tensors[count++];
  };
  // Each tensor is written once, by the stage that owns it, every tp rank its shard (replicated
  // tensors: tp rank 0): a whole tensor by dp rank 0, a ZeRO-sharded one by every dp rank its
  // pieces, as hyperslabs of the global dataset; the others with an empty selection.
  for (const auto& e : entries(model, opt)) {
    Snapshot::Tensor& rec = slot();
    rec.name = e.name;
    rec.type = DType::F32;
    rec.shape = e.shape;
    rec.selection = writes(e) ? selection_of(e) : Selection{};
    rec.bytes.clear();
    if (const auto n = elements(rec.selection); n > 0) {
      auto c = leading(e.local, n).to(torch::kCPU).contiguous();  // device tensors: to the host
      const auto* p = reinterpret_cast<const unsigned char*>(c.data_ptr<float>());
      rec.bytes.assign(p, p + c.numel() * sizeof(float));
    }
  }
  // Per-rank state: row `rank` of a (world, length) dataset, written by every rank.
  const auto world = static_cast<hsize_t>(grid_.shape().size()), me = static_cast<hsize_t>(grid_.rank());
  auto add_row = [&](const std::string& name, DType type, const void* data, hsize_t length) {
    Snapshot::Tensor& rec = slot();
    rec.name = name;
    rec.type = type;
    rec.shape = {world, length};
    rec.selection = {Slab{{me, 0}, {1, length}}};
    const auto* bytes = static_cast<const unsigned char*>(data);
    rec.bytes.assign(bytes, bytes + length * dtype_size(type));
  };
  for (auto& [name, values] : opt.rank_state()) {
    const auto host = values.to(torch::kCPU).contiguous();
    add_row("/comm/error_feedback/" + name, DType::F32, host.data_ptr<float>(), static_cast<hsize_t>(host.numel()));
  }
  if (tokenizer_) {  // `gridtrain generate` and `export` use it; written by rank 0
    Snapshot::Tensor& rec = slot();
    rec.name = "/tokenizer/model";
    rec.type = DType::U8;
    rec.shape = {tokenizer_->model.size()};
    rec.selection = rectangles(grid_.rank() == 0 ? Slab::all(rec.shape) : Slab::none());
    rec.bytes.assign(tokenizer_->model.begin(), grid_.rank() == 0 ? tokenizer_->model.end() : tokenizer_->model.begin());
  }
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  add_row("/rng/cpu", DType::U8, rng.data_ptr<std::uint8_t>(), static_cast<hsize_t>(rng.numel()));
  snap.tensors.resize(count);
}

void Checkpointer::Impl::launch(const std::shared_ptr<Snapshot>& snap, bool local, bool files) {
  saves_ += files;
  local_saves_ += local;
  pending_ = snap;
  auto both = [this, snap, local, files] {
    if (local) write_local(*snap);
    if (files) write(*snap);
  };
  if (!cfg_.checkpoint.async) return both();
  writer_ = std::thread([both] {
    try {
      both();
    } catch (const std::exception& e) {  // a failed background write is a fault on this rank
      abort_job("checkpoint write failed: " + std::string(e.what()));
    }
  });
}

void Checkpointer::Impl::join_writer() {
  if (writer_.joinable()) writer_.join();
}

void Checkpointer::Impl::wait() {
  const Stopwatch clock;
  join_writer();
  drain_s_ += clock.seconds();
}

std::optional<Failure> Checkpointer::Impl::phase(const std::string& where, const std::function<void()>& fn,
                                           const std::function<std::string(bool stuck)>& abandon) {
  watchdog_.arm(cfg_.comm.timeout_s, [&] {
    return where + "not finished on this rank within comm.timeout_s = " + seconds(cfg_.comm.timeout_s) +
           ": stuck in a collective HDF5 call after a failure" + abandon(true);
  });
  std::optional<Failure> failure;
  try {
    failure = agree_on(agree_comm_, fn, cfg_.comm.timeout_s, where);
  } catch (const std::exception& e) {  // the peers did not reach the agreement within comm.timeout_s
    abort_job(where + e.what() + abandon(true));
  }
  watchdog_.disarm();
  return failure;
}

void Checkpointer::Impl::abort_from(const Failure& failure, const std::function<std::string()>& message) {
  int rank = 0;
  MPI_Comm_rank(agree_comm_, &rank);
  if (rank == failure.rank) abort_job(message());
  // The reporting rank aborts the job; this one waits for that, so that its message is the one seen.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  abort_job("a checkpoint phase failed on rank " + std::to_string(failure.rank) + " (see its message)");
}

void Checkpointer::Impl::write_phase(const Snapshot& snap, const std::string& what, const std::function<void()>& fn) {
  const std::string where = "checkpoint '" + snap.tmp_path + "' (" + what + "): ";
  // Removes the .tmp and says so; a rank that got stuck, not knowing why, asks the OS (a probe write).
  // Each file it names is said to be this run's or another's: a file of another run at final_path
  // (one that appeared during the run) is that run's, never this one's complete checkpoint.
  auto abandon = [&](bool stuck) {
    ::unlink(snap.tmp_path.c_str());
    const int code = stuck ? probe_write(fs::path(snap.tmp_path).parent_path()) : 0;
    const std::string mine = "this run's (" + snap.lineage.run_id + ")", of_step = std::to_string(snap.step);
    const std::string theirs =
        snap.theirs.empty() ? "" : snap.final_path + " is run " + snap.theirs + "'s and was left as it was; ";
    const std::string fate =
        snap.committed       ? " checkpoint of step " + of_step + " was abandoned: " + snap.final_path + ", " + mine + ", is complete but "
        : !snap.kept.empty() ? " checkpoint of step " + of_step + " is complete and kept as " + snap.kept +
                                   " (--restart " + snap.kept + " continues from it); " + theirs
                             : " checkpoint of step " + of_step + " was abandoned: " + snap.tmp_path + " removed; " + theirs;
    return (code ? std::string(" (a probe write there: ") + std::strerror(code) + ")" : std::string()) + "; " + mine +
           fate + "'latest' is unchanged";
  };
  const auto failure = phase(where, fn, abandon);
  if (!failure) return;
  abort_from(*failure, [&] {
    return where + failure->message +
           (failure->failed_ranks > 1 ? " (failed on " + std::to_string(failure->failed_ranks) + " ranks)" : "") +
           abandon(false);
  });
}

void Checkpointer::Impl::write(const Snapshot& snap) {
  const Stopwatch clock;
  int rank = 0;
  MPI_Comm_rank(io_comm_, &rank);
  std::optional<CheckpointFile> file;
  write_phase(snap, "creating the directory", [&] {
    if (rank == 0) fs::create_directories(cfg_.checkpoint.dir);
  });
  write_phase(snap, "creating the file", [&] { file = CheckpointFile::create(snap.tmp_path, io_comm_); });
  const hid_t root = file->root();
  write_phase(snap, "writing the root attributes", [&] {
    h5_write_attr(root, "format", std::string(kCheckpointFormat));
    h5_write_attr(root, "version", static_cast<long long>(kCheckpointVersion));
    h5_write_attr(root, "step", snap.step);
    h5_write_attr(root, "tokens_seen", static_cast<long long>(snap.items_seen));
    const auto g = grid_.shape();
    h5_write_attr(root, "grid", g.csv());  // each axis's size, kAxes order
    h5_write_attr(root, "deck", config_text(cfg_));
    h5_write_attr(root, "created_by", std::string("gridtrain ") + kVersion);
    h5_write_attr(root, "run_id", snap.lineage.run_id);
    if (!snap.lineage.branched_from.empty()) h5_write_attr(root, "branched_from", snap.lineage.branched_from);
    // A requeue of this job continues the lineage these files carry (choose_resume).
    if (!snap.slurm_job.empty()) h5_write_attr(root, "slurm_job", snap.slurm_job);
  });
  for (const auto& t : snap.tensors)
    write_phase(snap, "writing datasets", [&] { file->write(t.name, t.type, t.shape, t.selection, t.bytes.data()); });
  write_phase(snap, "sealing the checksums", [&] { file->seal(); });
  write_phase(snap, "writing /optim, /data and /train", [&] {
    // groups are closed before the file: the MPI-IO driver refuses to close a file with open objects
    H5Id optim(H5Gopen2(root, "/optim", H5P_DEFAULT), "open /optim");
    h5_write_attr(optim, "type", snap.optim_type);
    h5_write_attr(optim, "step", snap.optim_steps);
    H5Id data(H5Gcreate2(root, "/data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "create /data");
    h5_write_attr(data, "seed", static_cast<long long>(cfg_.train.seed));
    h5_write_attr(data, "global_sample_index", static_cast<long long>(snap.sample_index));
    h5_write_attr(data, "epoch", static_cast<long long>(snap.epoch));
    h5_write_attr(data, "sampler", std::string(kSampleOrder));
    h5_write_attr(data, "corpus_sha256", corpus_.sha256);
    h5_write_attr(data, "tokenizer", corpus_.tokenizer);
    h5_write_attr(data, "train_tokens", static_cast<long long>(corpus_.train_size));
    h5_write_attr(data, "val_tokens", static_cast<long long>(corpus_.val_size));
    if (!corpus_.blend.empty()) h5_write_attr(data, "blend", corpus_.blend);
    H5Id train(H5Gcreate2(root, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "create /train");
    for (const auto& [name, values] : snap.train) h5_write_attr(train, name, values);
    if (tokenizer_) write_tokenizer_name(*file, tokenizer_->name);
  });
  if (cfg_.debug.slow_checkpoint_s > 0)  // fault injection: widen the window for crash tests
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.debug.slow_checkpoint_s));
  write_phase(snap, "flushing", [&] { file->flush(); });
  write_phase(snap, "closing", [&] { file->close(); });
  write_phase(snap, "committing", [&] {
    if (rank != 0) return;
    // claim_lineage() refused every such file at the start; this one appeared during the run.
    const std::string theirs = fs::exists(snap.final_path) ? checkpoint_run(snap.final_path) : "";
    if (!theirs.empty() && theirs != snap.lineage.run_id && !cfg_.output.overwrite) {
      snap.theirs = theirs;
      // This run's bytes are complete: kept under a name of its own lineage, which no directory
      // scan takes for a step file (nor prunes), for --restart to continue from.
      const std::string kept = fs::path(snap.final_path).replace_extension().string() + ".run-" + snap.lineage.run_id + ".h5";
      fs::rename(snap.tmp_path, kept);
      snap.kept = kept;
      throw Error(snap.final_path + " belongs to run " + theirs + " (not this run, " + snap.lineage.run_id +
                  ") and is not replaced; move it away, or set output.overwrite = true to replace it");
    }
    fs::rename(snap.tmp_path, snap.final_path);
    snap.committed = true;
    replace_file(fs::path(cfg_.checkpoint.dir) / "latest", checkpoint_name(snap.step) + "\n");
  });
  written_.insert(snap.step);
  if (rank == 0) prune(snap.step);
  write_s_ += clock.seconds();
}

// Only this run's checkpoints are deleted (run_id), and of those newer than the one the run
// started from only the ones this process wrote: a run resumed from an earlier checkpoint never
// deletes the later ones it did not write. Failing to delete is a warning, not a fault.
void Checkpointer::Impl::prune(long long step) {
  auto kept = 1;  // the one just written
  for (const auto& p : list_checkpoints(cfg_.checkpoint.dir)) {
    const long long s = checkpoint_step(p);
    if (s >= step || (s > start_step_ && !written_.contains(s)) || checkpoint_run(p) != lineage_.run_id) continue;
    if (kept < cfg_.checkpoint.keep_last) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove(p, ec);
    if (ec) std::fprintf(stderr, "WARNING: checkpoint.keep_last: cannot delete %s: %s\n", p.c_str(), ec.message().c_str());
  }
}

torch::Tensor Checkpointer::Impl::leading(const torch::Tensor& local, std::size_t n) {
  return local.detach().view({-1}).narrow(0, 0, static_cast<std::int64_t>(n));  // a view: loads write through it
}

// The public face: each operation is the implementation's (checkpointer_impl.hpp).
Checkpointer::Checkpointer(const Config& cfg, Grid& grid, Log& log, CorpusId corpus)
    : impl_(std::make_unique<Impl>(cfg, grid, log, std::move(corpus))) {}
Checkpointer::~Checkpointer() = default;
bool Checkpointer::enabled() const { return impl_->enabled(); }
bool Checkpointer::due(long long step) const { return impl_->due(step); }
long long Checkpointer::next_due(long long step) const { return impl_->next_due(step); }
void Checkpointer::save(long long step, std::uint64_t sample_index, std::uint64_t epoch, Model& model, Optimizer& opt,
                        const TrainState& train, bool stopping) {
  impl_->save(step, sample_index, epoch, model, opt, train, stopping);
}
void Checkpointer::wait() { impl_->wait(); }
std::optional<std::string> Checkpointer::resume_path(Model& model, Optimizer& opt) {
  return impl_->resume_path(model, opt);
}
ResumePoint Checkpointer::load(const std::string& path, Model& model, Optimizer& opt) {
  return impl_->load(path, model, opt);
}
void Checkpointer::load_weights(const std::string& path, Model& model, Optimizer& opt) {
  impl_->load_weights(path, model, opt);
}
void Checkpointer::use_parameter_pieces(const std::vector<NamedParameter>& pieces) {
  impl_->use_parameter_pieces(pieces);
}
void Checkpointer::add_state(const std::string& group, const std::vector<NamedParameter>& tensors,
                             std::string missing) {
  impl_->add_state(group, tensors, std::move(missing));
}

void Checkpointer::ignore_state(const std::string& group, std::string note) {
  impl_->ignore_state(group, std::move(note));
}
void Checkpointer::drop_local_parts() { impl_->drop_local_parts(); }
int Checkpointer::partner_rank(int rank) const {
  return impl_->partner_ ? partner_of(rank, impl_->grid_.shape().size(), impl_->ranks_per_node_) : -1;
}
int Checkpointer::saves() const { return impl_->saves_; }
int Checkpointer::local_saves() const { return impl_->local_saves_; }
double Checkpointer::local_write_s() const { return impl_->local_write_s_; }
double Checkpointer::stall_s() const { return impl_->stall_s_; }
double Checkpointer::drain_s() const { return impl_->drain_s_; }
double Checkpointer::write_s() const { return impl_->write_s_; }

}  // namespace gridtrain
