// Checkpointer, the local levels' save side: where ranks sit, each rank's part of a local step
// (local_part.hpp) into node memory, and its partner's copy (the load side is
// checkpointer_local_load.cpp). Multi-level checkpointing as SCR's PARTNER level (Moody et al.,
// SC'10) and Gemini's in-memory replicas (Wang et al., SOSP'23).
#include "checkpointer_impl.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <torch/torch.h>

#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/files.hpp"
#include "gridtrain/util/timer.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

// checkpoint.local_dir = auto: node memory, one directory per Slurm job (a requeue keeps the id;
// Slurm's epilog or the node's reboot clears /dev/shm), or per user outside Slurm.
fs::path resolve_local_dir(const std::string& key) {
  if (key != "auto") return key;
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job != nullptr && *job != '\0') return std::string("/dev/shm/gridtrain-") + job;
  const char* user = std::getenv("USER");
  return "/dev/shm/gridtrain-" + (user != nullptr && *user != '\0' ? std::string(user) : std::to_string(::getuid()));
}

}  // namespace

bool Checkpointer::Impl::local_due(long long step) const {
  return local_enabled() && step % cfg_.checkpoint.local_interval == 0;
}

void Checkpointer::Impl::place_ranks() {
  const MPI_Comm world = grid_.comm();
  const int me = grid_.rank(), size = grid_.shape().size();
  MPI_Comm_dup(world, &local_comm_);
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node_comm_);
  int leader = me, on_node = 1;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_comm_);
  MPI_Comm_size(node_comm_, &on_node);
  node_of_.resize(static_cast<std::size_t>(size));
  MPI_Allgather(&leader, 1, MPI_INT, node_of_.data(), 1, MPI_INT, world);
  MPI_Allreduce(MPI_IN_PLACE, &on_node, 1, MPI_INT, MPI_MAX, world);
  const int set = cfg_.checkpoint.ranks_per_node;
  ranks_per_node_ = set > 0 ? set : on_node;
  // The node each rank's partner copy must not share: the set one (simulated nodes) or the real one.
  auto node = [&](int r) { return set > 0 ? r / set : node_of_[static_cast<std::size_t>(r)]; };
  std::string why_not;
  if (!cfg_.checkpoint.partner) why_not = "checkpoint.partner = false";
  else if (ranks_per_node_ >= size) why_not = "all " + std::to_string(size) + " ranks share one node, so a partner copy would sit in the same memory";
  for (int r = 0; r < size && why_not.empty(); ++r)
    if (node(partner_of(r, size, ranks_per_node_)) == node(r))
      why_not = "rank " + std::to_string(r) + "'s partner, rank " + std::to_string(partner_of(r, size, ranks_per_node_)) +
                ", is on its node (ranks are not placed on nodes in blocks of " + std::to_string(ranks_per_node_) +
                "; set checkpoint.ranks_per_node)";
  partner_ = why_not.empty();
  local_dir_ = resolve_local_dir(cfg_.checkpoint.local_dir);
  checkpoint_dir_ = fs::weakly_canonical(fs::absolute(cfg_.checkpoint.dir)).string();
  agree(world, [&] {
    std::error_code ec;
    fs::create_directories(local_dir_, ec);
    const int code = ec ? ec.value() : probe_write(local_dir_);
    if (code != 0)
      throw Error("checkpoint.local_dir = " + cfg_.checkpoint.local_dir + " (" + local_dir_.string() + ") cannot be written on rank " +
                  std::to_string(me) + " (" + std::strerror(code) + "); valid: a writable node-local directory (node memory, "
                  "/dev/shm, or a node-local SSD)");
  });
  log_.print("Local checkpoints: every " + std::to_string(cfg_.checkpoint.local_interval) + " steps into " +
             local_dir_.string() + " on every node, the newest 2 kept; " +
             (partner_ ? "each rank's part also kept by rank (R + " + std::to_string(ranks_per_node_) + ") mod " +
                             std::to_string(size) + " on the next node (" + std::to_string(ranks_per_node_) + " ranks per node" +
                             (set > 0 ? ", checkpoint.ranks_per_node" : ", MPI's node-local split") + ")"
                       : "no partner copies: " + why_not) +
             "\n");
}

std::string Checkpointer::Impl::fingerprint(Model& model, Optimizer& opt) {
  if (!fingerprint_.empty()) return fingerprint_;
  std::string text = grid_.shape().csv() + "\nzero " + std::to_string(cfg_.optim.zero_stage) + "\nweights " +
                     name_of(cfg_.precision.weights) + "\noptimizer " + name_of(opt.type()) + "\nseed " +
                     std::to_string(cfg_.train.seed) + "\ncorpus " + corpus_.sha256 + " " + std::to_string(corpus_.train_size) + "\n";
  for (const auto& [key, value] : model_function(cfg_)) text += key + "=" + value + "\n";
  for (const auto& e : entries(model, opt)) text += e.name + " " + shape_text(e.shape) + "\n";
  text.resize((text.size() + 3) / 4 * 4, '\n');
  const std::vector<hsize_t> words{text.size() / 4};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xsum64(text.data(), DType::F32, words, Slab::all(words))));
  return fingerprint_ = hex;
}

// The copy that the step loop pays for: every tensor this rank holds, whole (its tp shard with
// padding, its ZeRO pieces), and its per-rank state, into the image buffer reused from the last save.
void Checkpointer::Impl::snapshot_local(const Snapshot& snap, Model& model, Optimizer& opt) {
  const PartHeader header{snap.lineage.run_id, snap.lineage.branched_from, snap.slurm_job, checkpoint_dir_, snap.step, grid_.rank(),
                          grid_.shape().size(), fingerprint(model, opt), snap.sample_index, snap.epoch,
                          snap.optim_steps, snap.optim_type, tokenizer_ ? tokenizer_->name : ""};
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // host, contiguous
  for (const auto& e : entries(model, opt))
    if (e.local.defined()) tensors.emplace_back(e.name, e.local.detach().to(torch::kCPU).contiguous());
  for (auto& [name, values] : opt.rank_state())
    tensors.emplace_back("/comm/error_feedback/" + name, values.to(torch::kCPU).contiguous());
  tensors.emplace_back("/rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
  for (const auto& [name, values] : snap.train)
    tensors.emplace_back("/train/" + name, torch::tensor(values, torch::kFloat64));
  if (tokenizer_ && !tokenizer_->model.empty())
    tensors.emplace_back("/tokenizer/model", torch::from_blob(const_cast<char*>(tokenizer_->model.data()),
                                                              {static_cast<std::int64_t>(tokenizer_->model.size())}, torch::kUInt8));
  std::vector<std::pair<std::string, std::size_t>> blobs;
  for (const auto& [name, t] : tensors) blobs.emplace_back(name, t.nbytes());
  local_image_.begin(header, blobs);
  for (std::size_t i = 0; i < tensors.size(); ++i) std::memcpy(local_image_.blob(i), tensors[i].second.data_ptr(), blobs[i].second);
}

void Checkpointer::Impl::write_local(const Snapshot& snap) {
  const Stopwatch clock;
  local_image_.seal();  // the checksum, off the step loop when async
  const int me = grid_.rank(), size = grid_.shape().size();
  const fs::path dir = local_step_dir(local_dir_, snap.lineage.run_id, snap.step);
  const std::string where = "local checkpoint of step " + std::to_string(snap.step) + " (" + dir.string() + "): ";
  auto own = agree_on(local_comm_, [&] {
    fs::create_directories(dir);
    write_part_file(dir / part_name(me, me), local_image_.bytes());
  }, cfg_.comm.timeout_s, where);
  std::optional<Failure> held;
  if (partner_) {
    const int source = (me - ranks_per_node_ % size + size) % size;  // whose partner this rank is
    exchange_bytes(local_comm_, local_image_.bytes(), partner_of(me, size, ranks_per_node_), held_image_.buffer(), source);
    held = agree_on(local_comm_, [&] { write_part_file(dir / part_name(source, me), held_image_.bytes()); },
                    cfg_.comm.timeout_s, where);
  }
  // A part that could not be written (node memory full) leaves this local step incomplete: a
  // resume passes over it to the partner copy or an older level. The run goes on.
  const std::pair<const char*, const std::optional<Failure>*> levels[] = {{"own", &own}, {"partner", &held}};
  for (const auto& [level, f] : levels)
    if (*f && me == 0) {
      const std::string more = (*f)->failed_ranks > 1 ? " and " + std::to_string((*f)->failed_ranks - 1) + " more" : "";
      std::fprintf(stderr, "WARNING: %s%s part not written on rank %d%s: %s; the step is not restorable from this level\n",
                   where.c_str(), level, (*f)->rank, more.c_str(), (*f)->message.c_str());
    }
  if (!own && !held) local_written_.push_back(snap.step);
  prune_local(snap.lineage.run_id);
  local_write_s_ += clock.seconds();
}

// The two newest local steps this process wrote are kept; this rank's files (its own parts and
// the copies it holds) of the lineage's older steps are deleted, whoever wrote them (an earlier
// attempt of the job). Failing to delete is a warning, not a fault.
void Checkpointer::Impl::prune_local(const std::string& run_id) {
  if (local_written_.size() < 2) return;
  const long long keep_from = local_written_[local_written_.size() - 2];
  const int me = grid_.rank();
  std::error_code ec;
  for (const auto& step_dir : fs::directory_iterator(local_dir_ / ("run-" + run_id), ec)) {
    const std::string name = step_dir.path().filename().string();
    if (!name.starts_with("step-") || std::atoll(name.c_str() + 5) >= keep_from) continue;
    for (const auto& f : fs::directory_iterator(step_dir.path(), ec))
      if (part_ranks(f.path()).second == me && !fs::remove(f.path(), ec))
        std::fprintf(stderr, "WARNING: cannot delete the local part %s: %s\n", f.path().c_str(), ec.message().c_str());
    fs::remove(step_dir.path(), ec);  // the last of the node's ranks removes the empty directory
  }
}

void Checkpointer::Impl::drop_local_parts() {
  const int me = grid_.rank();
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(local_dir_, ec))
    for (const auto& step : fs::directory_iterator(run.path(), ec))
      for (const auto& f : fs::directory_iterator(step.path(), ec))
        if (part_ranks(f.path()).second == me) fs::remove(f.path(), ec);
}

}  // namespace gridtrain
