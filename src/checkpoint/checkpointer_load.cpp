// Checkpointer, the load side: which checkpoint a run resumes from, and reading it back onto any
// grid (the save side is checkpointer.cpp).
#include "checkpointer_impl.hpp"

#include <algorithm>
#include <filesystem>

#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpoint_dir.hpp"
#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/version.hpp"

namespace fs = std::filesystem;

namespace gridtrain {

namespace {

// The file's model against this run's: every key that changes what the weights compute
// (registry's model_function) must agree, or the run would compute another model with them and
// say nothing. Throws gridtrain::Error listing each key with both values and the flags that fix it.
void check_model(hid_t root, const Config& cfg) {
  if (!h5_has_attr(root, "deck")) return;
  const Config was = parse_config(h5_read_attr_string(root, "deck"), "its deck", {});
  const auto theirs = model_function(was), ours = model_function(cfg);
  std::string differ, fix;
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    const auto& [key, value] = theirs[i];
    const auto it = std::find_if(ours.begin(), ours.end(), [&](const auto& k) { return k.first == key; });
    const std::string mine = it == ours.end() ? "(none)" : it->second;
    if (mine == value) continue;
    differ += (differ.empty() ? "" : "; ") + key + " = " + value + " in the checkpoint, " + mine + " in this run";
    fix += " --" + key + "=" + value;
    if (i == 0) break;  // another model type: its other keys do not compare
  }
  if (!differ.empty())
    throw Error("was written for another model than this run's deck describes (" + differ + "): its weights compute "
                "the checkpoint's model only. Give the deck the checkpoint's values:" + fix);
}

}  // namespace

std::optional<std::string> Checkpointer::Impl::resume_path(Model& model, Optimizer& opt) {
  const auto choice = choose_resume(cfg_.checkpoint.resume, cfg_.checkpoint.dir, grid_.comm());
  // The local levels continue what a scan chose (auto, a directory, a requeued job's own files),
  // never a file taken as named.
  if (local_enabled() && cfg_.checkpoint.resume.mode != Resume::Mode::None && (!choice || choice->scanned))
    if (auto local = choose_local(choice, model, opt)) return local;
  if (!choice) {
    if (cfg_.checkpoint.resume.mode != Resume::Mode::None)
      log_.print("Resume: no checkpoint in " + cfg_.checkpoint.dir + "; starting fresh\n");
    return std::nullopt;
  }
  log_.print("Resume: " + choice->path + " (" + choice->reason + ")\n");
  resume_scanned_ = choice->scanned;
  resume_file_ = choice->path;
  return choice->path;
}

void Checkpointer::Impl::read_phase(const std::string& path, const std::string& what, const std::function<void()>& fn) {
  const std::string where = "checkpoint '" + path + "': ";
  const auto failure = phase(where + what + ": ", fn, [](bool) { return std::string(); });
  if (!failure) return;
  const std::string& m = failure->message;
  if (failure->failed_ranks == grid_.shape().size())  // every rank saw it: a problem with the file
    throw Error(m.starts_with(where) ? m : where + m);
  // Some ranks hold an open file whose close is collective: this is a fault, not a clean stop.
  abort_from(*failure, [&] { return where + what + ": " + m; });
}

// The corpus the file was written for against this run's: a note when it changed and
// data.allow_change permits it, an Error when it does not.
std::string Checkpointer::Impl::check_corpus(hid_t data) const {
  if (!h5_has_attr(data, "train_tokens")) return "";  // checkpoints before the corpus was recorded have none
  const CorpusId was{h5_read_attr_string(data, "corpus_sha256"),
                     static_cast<std::uint64_t>(h5_read_attr_int(data, "train_tokens")),
                     static_cast<std::uint64_t>(h5_read_attr_int(data, "val_tokens")),
                     h5_has_attr(data, "tokenizer") ? h5_read_attr_string(data, "tokenizer") : corpus_.tokenizer,
                     std::string(),   // the tokenizer's model: covered by the sha256 of the tokens
                     std::string()};  // the blend: compared below
  std::string changed;
  if (was.train_size != corpus_.train_size || was.val_size != corpus_.val_size)
    changed = std::to_string(was.train_size) + " train / " + std::to_string(was.val_size) + " val tokens then, " +
              std::to_string(corpus_.train_size) + " / " + std::to_string(corpus_.val_size) + " now";
  if (was.sha256 != corpus_.sha256)
    changed += (changed.empty() ? "" : "; ") + std::string("source sha256 ") +
               (was.sha256.empty() ? "unknown" : was.sha256.substr(0, 16)) + " then, " +
               (corpus_.sha256.empty() ? "unknown" : corpus_.sha256.substr(0, 16)) + " now";
  if (was.tokenizer != corpus_.tokenizer)
    changed += (changed.empty() ? "" : "; ") + std::string("tokenizer ") + was.tokenizer + " then, " +
               corpus_.tokenizer + " now";
  // Files before the sampler was recorded drew each epoch as a stored Fisher–Yates shuffle.
  const std::string order = h5_has_attr(data, "sampler") ? h5_read_attr_string(data, "sampler") : "fisher-yates";
  if (order != kSampleOrder)
    changed += (changed.empty() ? "" : "; ") + std::string("sample order ") + order + " then, " + kSampleOrder +
               " now: the rest of the epoch is drawn in the new order, so some of its windows repeat and others "
               "are skipped";
  const std::string blend = h5_has_attr(data, "blend") ? h5_read_attr_string(data, "blend") : "";
  if (blend != corpus_.blend)
    changed += (changed.empty() ? "" : "; ") + std::string("data.blend '") + (blend.empty() ? "none" : blend) +
               "' then, '" + (corpus_.blend.empty() ? "none" : corpus_.blend) + "' now: from the resumed sample on, "
               "the datasets are drawn at the new weights, each continuing from the samples it had";
  if (changed.empty()) return "";
  const std::string data_key = corpus_.blend.empty() ? "data.path = " + cfg_.data.path : "data.blend";
  if (!cfg_.data.allow_change)
    throw Error("was written for another corpus than " + data_key + " (" + changed +
                "): its data position would be applied to different data. Resume with the same data, or set "
                "data.allow_change = true");
  return "; data.allow_change = true: the corpus changed (" + changed + ")";
}

std::string Checkpointer::Impl::inherit_tokenizer(const CheckpointFile& file, bool resume) {
  const auto theirs = read_tokenizer_record(file);
  if (!theirs) return "";
  if (corpus_.tokenizer == "none") {
    if (theirs->model.empty()) return "";  // bytes need no model: nothing to carry
    tokenizer_ = theirs;
    return "; its tokenizer, " + describe(*theirs) + ", goes on into this run's checkpoints (the data records none)";
  }
  const TokenizerRecord ours{corpus_.tokenizer, corpus_.tokenizer_model};
  if (resume || (theirs->name == ours.name && theirs->model == ours.model)) return "";
  const std::string data_key = corpus_.blend.empty() ? "data.path = " + cfg_.data.path : "data.blend";
  throw Error("carries the tokenizer " + describe(*theirs) + ", but " + data_key + " was prepared with " +
              (theirs->name == ours.name ? "another " : "") + describe(ours) + ": the same ids would be other tokens. "
              "Prepare the data with the checkpoint's tokenizer (a transformers model's: `gridtrain prepare ... "
              "--tokenizer-json MODEL_DIR`)");
}

std::string Checkpointer::Impl::read_header(CheckpointFile& file, Optimizer& opt, ResumePoint& at) {
  const hid_t root = file.root();
  file.check_header();
  check_model(root, cfg_);
  if (h5_has_attr(root, "weights_only"))
    throw Error("holds weights only (" + h5_read_attr_string(root, "weights_only") + "): no optimizer state or data "
                "position to resume from; start a fresh run from it with checkpoint.init_from");
  H5Id optim(H5Gopen2(root, "/optim", H5P_DEFAULT), "group /optim is missing");
  const std::string type = h5_read_attr_string(optim, "type");
  if (type != name_of(opt.type()))  // the file's spelling against the deck's
    throw Error("holds state of optimizer '" + type + "' but optim.type = '" + name_of(opt.type()) + "'");
  H5Id data(H5Gopen2(root, "/data", H5P_DEFAULT), "group /data is missing");
  const auto seed = static_cast<std::uint64_t>(h5_read_attr_int(data, "seed"));
  if (seed != cfg_.train.seed)
    throw Error("was written with train.seed = " + std::to_string(seed) + " but this run has " +
                std::to_string(cfg_.train.seed) + "; the data order would change. Resume with --train.seed=" +
                std::to_string(seed));
  std::string note = check_corpus(data);
  // The step fixes' groups (sparse training's masks, /sparse): needed by a run that keeps them,
  // unused by one that does not.
  for (const auto& [group, missing] : state_missing_)
    if (H5Lexists(root, ("/" + group).c_str(), H5P_DEFAULT) <= 0) throw Error(missing);
  for (const auto& [group, unused] : state_unused_)
    if (H5Lexists(root, ("/" + group).c_str(), H5P_DEFAULT) > 0) note += "; " + unused;
  at.step = h5_read_attr_int(root, "step");
  at.sample_index = static_cast<std::uint64_t>(h5_read_attr_int(data, "global_sample_index"));
  opt.set_steps(h5_read_attr_int(optim, "step"));
  if (h5_has_attr(root, "run_id")) lineage_.run_id = h5_read_attr_string(root, "run_id");
  if (H5Lexists(root, "/train", H5P_DEFAULT) > 0) {
    H5Id train(H5Gopen2(root, "/train", H5P_DEFAULT), "open /train");
    std::vector<std::string> names;
    H5Aiterate2(train, H5_INDEX_NAME, H5_ITER_INC, nullptr,
                [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                  static_cast<std::vector<std::string>*>(out)->push_back(name);
                  return 0;
                },
                &names);
    for (const auto& name : names) at.train.emplace_back(name, h5_read_attr_doubles(train, name));
  }
  return note;
}

// Per-rank state restores only onto the same number of ranks; a resharded run starts its RNG
// afresh and its error-feedback residuals at zero (returns true then).
bool Checkpointer::Impl::read_rank_state(CheckpointFile& file, Optimizer& opt) {
  const auto world = static_cast<hsize_t>(grid_.shape().size()), me = static_cast<hsize_t>(grid_.rank());
  auto read_row = [&](const std::string& name, DType dtype, void* out, hsize_t length) {
    const std::vector<hsize_t> shape{world, length};
    if (!file.exists(name) || file.shape_of(name) != shape) return false;
    file.read(name, dtype, shape, Slab{{me, 0}, {1, length}}, out);
    return true;
  };
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  if (read_row("/rng/cpu", DType::U8, rng.data_ptr<std::uint8_t>(), static_cast<hsize_t>(rng.numel()))) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
    gen.set_state(rng);
  }
  bool reset = false;
  for (auto& [name, values] : opt.rank_state()) {
    auto host = torch::empty({values.numel()}, torch::kFloat32);
    if (read_row("/comm/error_feedback/" + name, DType::F32, host.data_ptr<float>(), static_cast<hsize_t>(host.numel()))) {
      values.copy_(host);
    } else {
      values.zero_();
      reset = true;
    }
  }
  return reset;
}

ResumePoint Checkpointer::Impl::load(const std::string& path, Model& model, Optimizer& opt) {
  if (!local_choice_.empty() && path == local_choice_) return load_local(model, opt);
  ResumePoint at;
  bool reset_feedback = false;
  std::string data_note;
  std::optional<CheckpointFile> file;
  // The checks before the collective open, so that no rank enters it while another gave up.
  read_phase(path, "checking the file", [&] {
    if (!fs::exists(path)) throw Error("file not found");
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error("not an HDF5 file (truncated or corrupt?)");
  });
  read_phase(path, "opening", [&] { file = CheckpointFile::open(path, io_comm_); });
  read_phase(path, "reading the header", [&] {
    data_note = read_header(*file, opt, at);
    data_note += inherit_tokenizer(*file, true);
  });
  read_tensors(path, *file, entries(model, opt));
  read_phase(path, "per-rank state", [&] { reset_feedback = read_rank_state(*file, opt); });
  read_phase(path, "closing", [&] { file->close(); });
  start_step_ = at.step;
  if (enabled()) claim_lineage(resume_scanned_);
  log_.print("Resumed from " + path + " at step " + std::to_string(at.step) + " (global sample index " +
             std::to_string(at.sample_index) + ")" +
             (reset_feedback ? "; error-feedback residuals start at zero (written on another grid)" : "") + data_note +
             "\n");
  return at;
}

// Every rank reads the slab of each tensor it holds, whatever grid wrote the file: global shapes
// make any layout load any other.
void Checkpointer::Impl::read_tensors(const std::string& path, CheckpointFile& file, const std::vector<Entry>& tensors) {
  torch::NoGradGuard no_grad;
  for (const auto& e : tensors) {
    read_phase(path, "dataset " + e.name, [&] {
      const Selection selection = selection_of(e);  // a ZeRO piece: only its own elements
      const auto n = elements(selection);
      auto host = torch::empty({static_cast<std::int64_t>(std::max<std::size_t>(1, n))}, torch::kFloat32);
      file.read(e.name, DType::F32, e.shape, selection, host.data_ptr<float>(), writes(e));
      if (!e.local.defined()) return;
      leading(e.local, n).copy_(host.narrow(0, 0, static_cast<std::int64_t>(n)));
      // What follows is padding (rows past the vocabulary), in no dataset: zero.
      e.local.detach().view({-1}).narrow(0, static_cast<std::int64_t>(n), e.local.numel() - static_cast<std::int64_t>(n)).zero_();
    });
  }
}

void Checkpointer::Impl::load_weights(const std::string& path, Model& model, Optimizer& opt) {
  std::vector<Entry> weights;
  for (const auto& e : entries(model, opt))
    if (e.name.starts_with("/model/")) weights.push_back(e);
  std::optional<CheckpointFile> file;
  read_phase(path, "checking the file", [&] {
    if (!fs::exists(path)) throw Error("file not found (checkpoint.init_from)");
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error("not an HDF5 file (truncated or corrupt?)");
  });
  read_phase(path, "opening", [&] { file = CheckpointFile::open(path, io_comm_); });
  read_phase(path, "checking its model", [&] {
    file->check_header();
    check_model(file->root(), cfg_);
    std::set<std::string> have;
    for (const auto& d : file->datasets())
      if (d.starts_with("/model/")) have.insert(d);
    for (const auto& e : weights)
      if (!have.erase(e.name))
        throw Error("has no tensor " + e.name + " of this run's model (another model type or size? its deck: "
                    "`gridtrain inspect " + path + "`)");
    if (!have.empty())
      throw Error("holds " + *have.begin() + ", which this run's model lacks (another model type or size?)");
  });
  std::string note;
  read_phase(path, "checking its tokenizer", [&] { note = inherit_tokenizer(*file, false); });
  read_tensors(path, *file, weights);
  read_phase(path, "closing", [&] { file->close(); });
  log_.print("Initialized the weights from " + path + " (checkpoint.init_from; optimizer state and step start fresh)" +
             note + "\n");
}

void Checkpointer::Impl::claim_lineage(bool scanned) {
  agree(grid_.comm(), [&] {
    if (grid_.rank() != 0) return;
    const std::string dir = cfg_.checkpoint.dir;
    // A resumed branch stays one: its files go on recording what it branched from.
    if (!resume_file_.empty()) {
      const CheckpointOrigin origin = checkpoint_origin(resume_file_);
      if (origin.run_id == lineage_.run_id) lineage_.branched_from = origin.branched_from;
    }
    std::vector<std::pair<fs::path, std::string>> later, others;  // (file, run): this lineage's later files; other runs'
    for (const auto& f : list_checkpoints(dir)) {
      const std::string run = checkpoint_run(f);
      if (run.empty()) continue;  // unreadable: it cannot be resumed from, and a commit may replace it
      if (run != lineage_.run_id) others.emplace_back(f, run);
      else if (checkpoint_step(f) > start_step_ && !scanned) later.emplace_back(f, run);
    }
    std::string parent;  // the run this one branches from here, if it does
    if (!later.empty()) {  // restarted from an older step of a lineage that went on: a branch
      parent = lineage_.run_id;
      lineage_ = {random_run_id(), parent + "@" + std::to_string(start_step_)};
      log_.print("Lineage: run " + parent + " went on past step " +
                 std::to_string(start_step_) + " here (" + later.front().first.filename().string() +
                 "), so this run is a branch: run " + lineage_.run_id + ", branched from it at step " +
                 std::to_string(start_step_) + "; its files are never deleted or replaced by this run\n");
      others.insert(others.end(), later.begin(), later.end());
    }
    std::string replaced;
    for (const auto& [f, run] : others) {
      const long long s = checkpoint_step(f);
      if (s > start_step_ && s <= cfg_.train.steps && file_due(s))
        replaced += (replaced.empty() ? "" : ", ") + f.filename().string() + " (run " + run + ")";
    }
    if (replaced.empty()) return;
    // Each file is named with its own run; this run says what it is (a branch of whom).
    const std::string self = lineage_.run_id + (parent.empty() ? ", from step " : ", a branch of run " + parent + " at step ") +
                             std::to_string(start_step_);
    if (!cfg_.output.overwrite)
      throw Error("checkpoint.dir = " + dir + " holds " + replaced + ", which this run (" + self +
                  ") would replace with its own checkpoints of those steps; another run's state (a branch's parent "
                  "included) is never overwritten. Use a checkpoint.dir of this run's own, move those "
                  "files away, or set output.overwrite = true to replace them");
    log_.print("output.overwrite = true: this run will replace " + replaced + "\n");
  });
  const std::string lineage = broadcast_text(lineage_.run_id + "\n" + lineage_.branched_from, grid_.comm());  // rank 0's decision
  lineage_.run_id = lineage.substr(0, lineage.find('\n'));
  lineage_.branched_from = lineage.substr(lineage.find('\n') + 1);
}

}  // namespace gridtrain
