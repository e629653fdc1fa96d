#include "gridtrain/checkpoint/checkpointer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <torch/torch.h>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"
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
    Slab slab;
    std::vector<unsigned char> bytes;
  };
  long long step = 0;
  std::uint64_t sample_index = 0, epoch = 0;
  std::string optim_type;
  long long optim_steps = 0;
  TrainState train;
  std::vector<Tensor> tensors;
  std::string tmp_path, final_path;
};

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Durable, atomic replacement of a small text file.
void replace_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp.string());
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
  fs::rename(tmp, path);
  fd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

// This rank's hyperslab of a tensor sharded by spec over tp rank r of n (docs/checkpoint-format.md).
Slab shard_slab(const ShardSpec& spec, const std::vector<hsize_t>& shape, int r, int n) {
  Slab s = Slab::all(shape);
  if (spec.dim < 0) return s;
  const auto d = static_cast<std::size_t>(spec.dim);
  const auto rows = static_cast<hsize_t>(shard_rows(spec, n)), valid = static_cast<hsize_t>(valid_rows(spec, r, n));
  if (valid == 0) return Slab::none();
  s.offset[d] = static_cast<hsize_t>(r) * rows;
  s.count[d] = valid;
  if (spec.parts > 1) {
    if (d != 0 || valid != rows) throw std::logic_error("fused parts are supported along dimension 0, unpadded");
    s.count[0] = rows;
    s.blocks = static_cast<hsize_t>(spec.parts);
    s.stride = shape[0] / s.blocks;
  }
  return s;
}

// The local rows a slab covers: the local tensor's first ones (padding, if any, comes last).
torch::Tensor slab_rows(const torch::Tensor& local, const Slab& slab) {
  const auto row = std::max<std::int64_t>(1, local.dim() > 1 ? local[0].numel() : 1);
  return local.narrow(0, 0, static_cast<std::int64_t>(slab.elements()) / row);
}

long long step_of(const fs::path& p) {
  // step-<digits>.h5 → the number; anything else (a .tmp, a stray file) → -1
  const std::string n = p.filename().string();
  if (n.size() < 9 || n.rfind("step-", 0) != 0 || n.substr(n.size() - 3) != ".h5") return -1;
  long long step = -1;
  const char* first = n.data() + 5;
  const char* last = n.data() + n.size() - 3;
  auto [ptr, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && ptr == last ? step : -1;
}

}  // namespace

Checkpointer::Checkpointer(const Config& cfg, Grid& grid, Log& log) : cfg_(cfg), grid_(grid), log_(log) {
  if (enabled()) {
    agree(grid.comm(), [&] {
      if (grid.rank() != 0) return;
      const fs::path dir(cfg.checkpoint.dir);
      if (fs::exists(dir) && !fs::is_directory(dir))
        throw Error("checkpoint.dir = " + cfg.checkpoint.dir + " exists and is not a directory; valid: a directory "
                    "(created if missing) or none");
      // A step-*.h5.tmp is a write that a crash interrupted; it never became `latest`.
      if (fs::exists(dir))
        for (const auto& e : fs::directory_iterator(dir))
          if (e.path().filename().string().starts_with("step-") && e.path().extension() == ".tmp") {
            log.print("Checkpoints: removing " + e.path().string() + " (an interrupted write)\n");
            fs::remove(e.path());
          }
    });
  }
  MPI_Comm_dup(grid.comm(), &io_comm_);
  if (cfg.checkpoint.async) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error("checkpoint.async = true needs an MPI library with MPI_THREAD_MULTIPLE support (this one "
                  "provides level " + std::to_string(provided) + "); set checkpoint.async = false");
  }
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
  MPI_Comm_free(&io_comm_);
}

bool Checkpointer::due(long long step) const {
  if (!enabled()) return false;
  return step == cfg_.train.steps || (cfg_.checkpoint.interval > 0 && step % cfg_.checkpoint.interval == 0);
}

std::string Checkpointer::file_name(long long step) const {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.h5", step);
  return (fs::path(cfg_.checkpoint.dir) / name).string();
}

// Every model and optimizer tensor of the whole grid, by dataset name (sorted; the same list on
// every rank, since collective HDF5 calls must match), with this rank's local tensor where it
// holds one. Collective the first time (each rank contributes the names and global shapes it
// knows); the model and optimizer keep their tensors, so later calls reuse the list.
const std::vector<Checkpointer::Entry>& Checkpointer::entries(LanguageModel& model, Optimizer& opt) {
  if (!entries_.empty()) return entries_;
  std::map<std::string, Entry> all;
  for (const auto& p : model.named_parameters(true)) {
    const auto spec = model.shard(p.key());
    all["/model/" + p.key()] = {{}, {spec.global_shape.begin(), spec.global_shape.end()}, p.value(), spec};
  }
  for (const auto& st : opt.state()) {
    const auto spec = model.shard(st.name.substr(0, st.name.find('/')));  // "<param>/<state>"
    all["/optim/" + st.name] = {{}, {spec.global_shape.begin(), spec.global_shape.end()}, st.param, spec};
  }
  std::string mine;
  for (const auto& [name, e] : all) {
    mine += name;
    for (auto d : e.shape) (mine += ' ') += std::to_string(d);
    mine += "\n";
  }
  int n = 0, size = 0, length = static_cast<int>(mine.size());
  MPI_Comm_size(grid_.comm(), &size);
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, grid_.comm());
  for (int r = 0; r < size; ++r) offsets[static_cast<std::size_t>(r)] = n, n += lengths[static_cast<std::size_t>(r)];
  std::string everyone(static_cast<std::size_t>(n), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, everyone.data(), lengths.data(), offsets.data(), MPI_CHAR, grid_.comm());
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

bool Checkpointer::writes(const Entry& e) const {
  return e.local.defined() && grid_.dp().rank() == 0 && e.spec.owner && (e.spec.dim >= 0 || grid_.tp().rank() == 0);
}

Slab Checkpointer::slab_of(const Entry& e) const {
  return e.local.defined() ? shard_slab(e.spec, e.shape, grid_.tp().rank(), grid_.tp().size()) : Slab::none();
}

void Checkpointer::save(long long step, std::uint64_t sample_index, std::uint64_t epoch, LanguageModel& model,
                        Optimizer& opt, const TrainState& train) {
  const auto t0 = Clock::now();
  join_writer();  // one write in flight at a time
  // Reuse the previous snapshot's buffers: after the first save, the copy allocates nothing.
  auto snap = pending_ ? pending_ : std::make_shared<Snapshot>();
  snap->step = step;
  snap->sample_index = sample_index;
  snap->train = train;
  snap->epoch = epoch;
  snap->optim_type = opt.type();
  snap->optim_steps = opt.steps();
  snap->final_path = file_name(step);
  snap->tmp_path = snap->final_path + ".tmp";
  std::size_t count = 0;
  auto slot = [&]() -> Snapshot::Tensor& {
    if (count == snap->tensors.size()) snap->tensors.emplace_back();
    return snap->tensors[count++];
  };
  // Each tensor is written once: by dp rank 0 of the stage that owns it, every tp rank its shard
  // (replicated tensors: tp rank 0), the others with an empty selection.
  for (const auto& e : entries(model, opt)) {
    Snapshot::Tensor& rec = slot();
    rec.name = e.name;
    rec.type = DType::F32;
    rec.shape = e.shape;
    rec.slab = writes(e) ? slab_of(e) : Slab::none();
    rec.bytes.clear();
    if (rec.slab.elements() > 0) {
      auto c = slab_rows(e.local.detach(), rec.slab).to(torch::kCPU).contiguous();  // device tensors: to the host
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
    rec.slab = Slab{{me, 0}, {1, length}};
    const auto* bytes = static_cast<const unsigned char*>(data);
    rec.bytes.assign(bytes, bytes + length * dtype_size(type));
  };
  for (auto& [name, values] : opt.rank_state()) {
    const auto host = values.to(torch::kCPU).contiguous();
    add_row("/comm/error_feedback/" + name, DType::F32, host.data_ptr<float>(), static_cast<hsize_t>(host.numel()));
  }
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  add_row("/rng/cpu", DType::U8, rng.data_ptr<std::uint8_t>(), static_cast<hsize_t>(rng.numel()));
  snap->tensors.resize(count);

  ++saves_;
  pending_ = snap;
  if (cfg_.checkpoint.async) {
    writer_ = std::thread([this, snap] {
      try {
        write(*snap);
      } catch (const std::exception& e) {  // a failed background write is a fault on this rank
        std::fprintf(stderr, "ERROR on rank %d: checkpoint write failed: %s\n", grid_.rank(), e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, kExitError);
      }
    });
  } else {
    write(*snap);
  }
  stall_s_ += since(t0);
}

void Checkpointer::join_writer() {
  if (writer_.joinable()) writer_.join();
}

void Checkpointer::wait() {
  const auto t0 = Clock::now();
  join_writer();
  drain_s_ += since(t0);
}

void Checkpointer::write(const Snapshot& snap) {
  const auto t0 = Clock::now();
  int rank = 0;
  MPI_Comm_rank(io_comm_, &rank);
  if (rank == 0) fs::create_directories(cfg_.checkpoint.dir);
  MPI_Barrier(io_comm_);
  {
    auto file = CheckpointFile::create(snap.tmp_path, io_comm_);
    const hid_t root = file.root();
    h5_write_attr(root, "format", std::string("gridtrain-checkpoint"));
    h5_write_attr(root, "version", static_cast<long long>(kCheckpointVersion));
    h5_write_attr(root, "step", snap.step);
    h5_write_attr(root, "tokens_seen", static_cast<long long>(snap.sample_index * cfg_.model.block_size));
    const auto g = grid_.shape();
    h5_write_attr(root, "grid", std::to_string(g.dp) + "," + std::to_string(g.tp) + "," + std::to_string(g.pp));
    h5_write_attr(root, "deck", config_text(cfg_));
    h5_write_attr(root, "created_by", std::string("gridtrain ") + kVersion);
    for (const auto& t : snap.tensors) file.write(t.name, t.type, t.shape, t.slab, t.bytes.data());
    {  // groups are closed before the file: the MPI-IO driver refuses to close a file with open objects
      H5Id optim(H5Gopen2(root, "/optim", H5P_DEFAULT), "open /optim");
      h5_write_attr(optim, "type", snap.optim_type);
      h5_write_attr(optim, "step", snap.optim_steps);
      H5Id data(H5Gcreate2(root, "/data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "create /data");
      h5_write_attr(data, "seed", static_cast<long long>(cfg_.train.seed));
      h5_write_attr(data, "global_sample_index", static_cast<long long>(snap.sample_index));
      h5_write_attr(data, "epoch", static_cast<long long>(snap.epoch));
      H5Id train(H5Gcreate2(root, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "create /train");
      for (const auto& [name, values] : snap.train) h5_write_attr(train, name, values);
    }
    if (cfg_.debug.slow_checkpoint_s > 0)  // fault injection: widen the window for crash tests
      std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.debug.slow_checkpoint_s));
    file.flush();
    file.close();
  }
  MPI_Barrier(io_comm_);  // every rank has closed the file
  if (rank == 0) {
    fs::rename(snap.tmp_path, snap.final_path);
    replace_file(fs::path(cfg_.checkpoint.dir) / "latest", fs::path(snap.final_path).filename().string());
    std::vector<fs::path> old;
    for (const auto& e : fs::directory_iterator(cfg_.checkpoint.dir))
      if (step_of(e.path()) >= 0 && step_of(e.path()) < snap.step) old.push_back(e.path());
    std::sort(old.begin(), old.end());
    const std::size_t keep = static_cast<std::size_t>(std::max(0, cfg_.checkpoint.keep_last - 1));
    for (std::size_t i = 0; i + keep < old.size(); ++i) fs::remove(old[i]);
  }
  MPI_Barrier(io_comm_);
  write_s_ += since(t0);
}

std::optional<std::string> Checkpointer::resume_path() {
  const std::string& how = cfg_.checkpoint.resume;
  if (how == "none") return std::nullopt;
  if (how != "auto") return how;
  const fs::path latest = fs::path(cfg_.checkpoint.dir) / "latest";
  std::string name;
  if (grid_.rank() == 0) {
    std::ifstream in(latest);
    if (in) in >> name;
  }
  int n = static_cast<int>(name.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, grid_.comm());
  name.resize(static_cast<std::size_t>(n));
  MPI_Bcast(name.data(), n, MPI_CHAR, 0, grid_.comm());
  if (name.empty()) {
    log_.print("Resume: no checkpoint in " + cfg_.checkpoint.dir + " (no 'latest'); starting fresh\n");
    return std::nullopt;
  }
  return (fs::path(cfg_.checkpoint.dir) / name).string();
}

ResumePoint Checkpointer::load(const std::string& path, LanguageModel& model, Optimizer& opt) {
  ResumePoint at;
  bool reset_feedback = false;
  const std::string where = "checkpoint '" + path + "': ";
  // Two phases, so that no rank enters the collective open while another already gave up.
  agree(grid_.comm(), [&] {
    if (!fs::exists(path)) throw Error(where + "file not found");
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(where + "not an HDF5 file (truncated or corrupt?)");
  });
  agree(grid_.comm(), [&] {
    try {
      auto file = CheckpointFile::open(path, grid_.comm());
      const hid_t root = file.root();
      const std::string format = h5_has_attr(root, "format") ? h5_read_attr_string(root, "format") : "";
      if (format != "gridtrain-checkpoint") throw Error(where + "not a gridtrain checkpoint (format = '" + format + "')");
      const long long version = h5_read_attr_int(root, "version");
      if (version != kCheckpointVersion)
        throw Error(where + "format version " + std::to_string(version) + "; this gridtrain reads version " +
                    std::to_string(kCheckpointVersion));
      H5Id optim(H5Gopen2(root, "/optim", H5P_DEFAULT), "group /optim is missing");
      const std::string type = h5_read_attr_string(optim, "type");
      if (type != opt.type())
        throw Error(where + "holds state of optimizer '" + type + "' but optim.type = '" + opt.type() + "'");
      torch::NoGradGuard no_grad;
      // Every rank reads the slab of each tensor it holds, whatever grid wrote the file: global
      // shapes make any layout load any other.
      for (const auto& e : entries(model, opt)) {
        const Slab slab = slab_of(e);
        auto host = torch::empty({static_cast<std::int64_t>(std::max<std::size_t>(1, slab.elements()))}, torch::kFloat32);
        file.read(e.name, DType::F32, e.shape, slab, host.data_ptr<float>(), writes(e));
        if (slab.elements() == 0) continue;
        auto rows = slab_rows(e.local, slab);
        rows.copy_(host.view(rows.sizes()));
      }
      opt.set_steps(h5_read_attr_int(optim, "step"));
      H5Id data(H5Gopen2(root, "/data", H5P_DEFAULT), "group /data is missing");
      const auto seed = static_cast<std::uint64_t>(h5_read_attr_int(data, "seed"));
      if (seed != cfg_.train.seed)
        throw Error(where + "was written with train.seed = " + std::to_string(seed) + " but this run has " +
                    std::to_string(cfg_.train.seed) + "; the data order would change. Resume with --train.seed=" +
                    std::to_string(seed));
      at.step = h5_read_attr_int(root, "step");
      at.sample_index = static_cast<std::uint64_t>(h5_read_attr_int(data, "global_sample_index"));
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
      // Per-rank state restores only onto the same number of ranks; a resharded run starts
      // its RNG afresh and its error-feedback residuals at zero.
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
      for (auto& [name, values] : opt.rank_state()) {
        auto host = torch::empty({values.numel()}, torch::kFloat32);
        if (read_row("/comm/error_feedback/" + name, DType::F32, host.data_ptr<float>(), static_cast<hsize_t>(host.numel()))) {
          values.copy_(host);
        } else {
          values.zero_();
          reset_feedback = true;
        }
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(where + e.what());
    }
  });
  log_.print("Resumed from " + path + " at step " + std::to_string(at.step) + " (global sample index " +
             std::to_string(at.sample_index) + ")" +
             (reset_feedback ? "; error-feedback residuals start at zero (written on another grid)" : "") + "\n");
  return at;
}

}  // namespace gridtrain
