// Checkpointer, the local levels' load side: which local step a resume takes (every rank's part
// found at some level and verified), and restoring it, each part read on the node that holds it
// and sent to its rank (the save side is checkpointer_local.cpp).
#include "checkpointer_impl.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "gridtrain/grid/grid.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

// One part file a rank of the file's node verified: where it is, whose, and what is wrong with it.
struct Found {
  std::string path, run;
  long long step = -1;
  int owner = -1, holder = -1, reader = -1;  // reader: the world rank that verified it
  std::size_t bytes = 0;
  bool ours = true;     // written for this run's checkpoint.dir (a part that cannot be read counts as ours)
  std::string problem;  // "" when it passed every check
};

std::string record(const Found& f) {
  return f.path + "\t" + f.run + "\t" + std::to_string(f.step) + "\t" + std::to_string(f.owner) + "\t" +
         std::to_string(f.holder) + "\t" + std::to_string(f.bytes) + "\t" + (f.ours ? "1" : "0") + "\t" + f.problem + "\n";
}

Found parse_record(const std::string& line, int reader) {
  std::istringstream in(line);
  Found f;
  std::string step, owner, holder, bytes, ours;
  std::getline(in, f.path, '\t');
  std::getline(in, f.run, '\t');
  std::getline(in, step, '\t');
  std::getline(in, owner, '\t');
  std::getline(in, holder, '\t');
  std::getline(in, bytes, '\t');
  std::getline(in, ours, '\t');
  std::getline(in, f.problem);
  f.ours = ours == "1";
  f.step = std::atoll(step.c_str());
  f.owner = std::atoi(owner.c_str());
  f.holder = std::atoi(holder.c_str());
  f.bytes = static_cast<std::size_t>(std::atoll(bytes.c_str()));
  f.reader = reader;
  return f;
}

// Rank 0 of the node: every part file under local (run-*/step-*/rank-*.part), one path a line.
std::string list_parts(const fs::path& local) {
  std::string out;
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(local, ec))
    if (run.path().filename().string().starts_with("run-"))
      for (const auto& step : fs::directory_iterator(run.path(), ec))
        for (const auto& f : fs::directory_iterator(step.path(), ec))
          if (part_ranks(f.path()).first >= 0) out += f.path().string() + "\n";
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j;
  }
  return out;
}

// The records of this node's parts that this rank verified (list_parts's, round-robin over the
// node's ranks): each read, checksummed, and checked against this run (owner, step and run of its
// name, world, fingerprint; `ours`: of this checkpoint.dir). Collective over node.
std::string verify_node_parts(const fs::path& local, MPI_Comm node, int world, const std::string& fingerprint,
                              const std::string& checkpoint_dir, PartImage& image) {
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  std::istringstream paths(broadcast_text(node_rank == 0 ? list_parts(local) : "", node));
  std::string verified;
  int i = 0;
  for (std::string path; std::getline(paths, path); ++i) {
    if (i % node_size != node_rank) continue;
    const fs::path p(path);
    const auto [owner, holder] = part_ranks(p);
    Found f;
    f.path = path;
    f.run = p.parent_path().parent_path().filename().string().substr(4);  // run-<id>/step-<n>/
    f.step = std::atoll(p.parent_path().filename().string().c_str() + 5);
    f.owner = owner;
    f.holder = holder;
    try {
      read_part_file(p, image.buffer());
      f.bytes = image.buffer().size();
      image.parse();
      const PartHeader& h = image.header();
      f.ours = h.checkpoint_dir == checkpoint_dir;
      if (h.rank != f.owner || h.step != f.step || h.run_id != f.run) throw Error("its header names another part");
      if (h.world != world)
        throw Error("written by " + std::to_string(h.world) + " ranks, this run has " + std::to_string(world));
      if (h.fingerprint != fingerprint)
        throw Error("written for another grid, model, optimizer or corpus (fingerprint " + h.fingerprint +
                    ", this run's " + fingerprint + ")");
    } catch (const std::exception& e) {
      f.problem = e.what();
    }
    verified += record(f);
  }
  return verified;
}

// "rank 0 from its own copy, rank 1 from its partner copy (held by rank 0)": where pick's parts are.
std::string levels_text(const std::vector<const Found*>& source) {
  std::vector<int> own;
  std::string partner;
  for (std::size_t r = 0; r < source.size(); ++r) {
    if (source[r]->holder == source[r]->owner) own.push_back(static_cast<int>(r));
    else partner += ", rank " + std::to_string(r) + " from its partner copy (held by rank " + std::to_string(source[r]->holder) + ")";
  }
  if (own.empty()) return partner.substr(2);
  return (own.size() == 1 ? "rank " + ranks_text(own) + " from its own copy" : "ranks " + ranks_text(own) + " from their own copies") +
         partner;
}

// What choose_local decided, the same on every rank (it is computed from the same findings).
struct Pick {
  std::string run;
  long long step = -1;                  // -1: no local step is taken
  std::vector<const Found*> source;     // by owner rank: the copy restored
  std::string passed_over, others;      // why newer local steps were not taken; other runs' parts
};

// The newest local step of run (the file-system level's lineage, or without one the one lineage
// of checkpoint.dir the parts hold) newer than fs_step at which every rank's part passed its
// checks at some level: its own copy first, else its partner's.
Pick pick_local(const std::vector<Found>& found, const std::string& fs_run, long long fs_step, int world) {
  Pick p;
  std::map<std::string, std::set<long long>> by_run;  // this checkpoint.dir's lineages in the parts
  std::map<std::string, std::set<long long>> foreign;  // other runs': never adopted
  for (const auto& f : found) (f.ours && (fs_run.empty() || f.run == fs_run) ? by_run : foreign)[f.run].insert(f.step);
  if (fs_run.empty() && by_run.size() > 1) {
    std::string list;
    for (const auto& [run, steps] : by_run) list += (list.empty() ? "run " : "; run ") + run + " (newest step " + std::to_string(*steps.rbegin()) + ")";
    throw Error("checkpoint.local_dir holds local steps of " + std::to_string(by_run.size()) + " runs of this checkpoint.dir (" + list +
                ") and checkpoint.dir none to tell which one this run continues; remove the other runs' run-<id> "
                "directories from checkpoint.local_dir, or resume a checkpoint file with --restart");
  }
  for (const auto& [run, steps] : foreign)
    p.others += (p.others.empty() ? "" : ", ") + std::string("run ") + run + " (steps " + std::to_string(*steps.begin()) +
                "-" + std::to_string(*steps.rbegin()) + ")";
  if (by_run.empty()) return p;
  p.run = by_run.begin()->first;
  for (auto it = by_run.begin()->second.rbegin(); it != by_run.begin()->second.rend() && *it > fs_step; ++it) {
    std::vector<const Found*> best(static_cast<std::size_t>(world), nullptr);
    std::vector<std::string> own_why(static_cast<std::size_t>(world)), partner_why(static_cast<std::size_t>(world));
    std::set<std::string> problems;  // the step's distinct problems
    for (const auto& f : found) {
      if (f.run != p.run || f.step != *it || f.owner >= world) continue;
      const auto o = static_cast<std::size_t>(f.owner);
      const bool own = f.holder == f.owner;
      if (!f.problem.empty()) {
        problems.insert(f.problem);
        (own ? own_why[o] : partner_why[o]) += own ? "its own copy " + f.problem : "the copy rank " + std::to_string(f.holder) + " holds " + f.problem;
        continue;
      }
      if (best[o] == nullptr || own) best[o] = &f;
    }
    std::string missing;
    int count = 0;
    for (int r = 0; r < world; ++r)
      if (best[static_cast<std::size_t>(r)] == nullptr && count++ < 3) {
        const auto o = static_cast<std::size_t>(r);
        const std::string w = own_why[o] + (own_why[o].empty() || partner_why[o].empty() ? "" : "; ") + partner_why[o];
        missing += (missing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + "'s part is at no level (" +
                   (w.empty() ? "no copy found" : w) + ")";
      }
    // A step whose every part has one problem (another grid's, say) is named once.
    if (count == world && problems.size() == 1) {
      missing = "every part " + *problems.begin();
      count = 0;
    }
    if (missing.empty()) {
      p.step = *it;
      p.source = best;
      return p;
    }
    p.passed_over += (p.passed_over.empty() ? "" : "; ") + std::string("local step ") + std::to_string(*it) + ": " + missing +
                     (count > 3 ? "; and " + std::to_string(count - 3) + " more ranks" : "");
  }
  return p;
}

}  // namespace

std::optional<std::string> Checkpointer::Impl::choose_local(const std::optional<ResumeChoice>& fs_choice, Model& model,
                                                            Optimizer& opt) {
  const int world = grid_.shape().size();
  std::string fs_run;  // the lineage the file-system level resolved to, and its step
  long long fs_step = -1;
  if (fs_choice) {
    const CheckpointOrigin o = grid_.rank() == 0 ? checkpoint_origin(fs_choice->path) : CheckpointOrigin{};
    std::istringstream in(broadcast_text(o.run_id + " " + std::to_string(o.step), grid_.comm()));
    in >> fs_run >> fs_step;
  }
  // Every part on this node, verified by the node's ranks round-robin; then everyone's findings.
  const std::string verified =
      verify_node_parts(local_dir_, node_comm_, world, fingerprint(model, opt), checkpoint_dir_, held_image_);
  held_image_.buffer() = {};  // the largest buffer of the scan: not kept
  std::vector<Found> found;
  const auto texts = grid_.world().blocking_gather_text(verified, "local parts found");
  for (int r = 0; r < world; ++r) {
    std::istringstream lines(texts[static_cast<std::size_t>(r)]);
    for (std::string line; std::getline(lines, line);) found.push_back(parse_record(line, r));
  }
  if (found.empty()) {
    log_.print("Resume: the local levels hold no part in " + local_dir_.string() + " on any node (node memory lost, or "
               "none written yet); falling back to the file system\n");
    return std::nullopt;
  }
  const Pick pick = pick_local(found, fs_run, fs_step, world);
  const std::string others = pick.others.empty() ? "" : "; skipped other runs' local parts: " + pick.others + ", never adopted";
  const std::string fs_text = fs_choice ? fs_choice->path : "no checkpoint in checkpoint.dir";
  if (pick.step < 0) {
    log_.print("Resume: no local step newer than " + fs_text + " is complete" +
               (pick.passed_over.empty() ? "" : ": " + pick.passed_over + "; falling back to the file system") + others + "\n");
    return std::nullopt;
  }
  local_sources_.clear();
  for (int r = 0; r < world; ++r) {
    const Found& f = *pick.source[static_cast<std::size_t>(r)];
    // Read by its own rank where the file is on its node; else by the rank that verified it, and sent.
    const bool near = node_of_[static_cast<std::size_t>(r)] == node_of_[static_cast<std::size_t>(f.reader)];
    local_sources_.push_back({f.path, near ? r : f.reader, f.bytes});
  }
  local_choice_ = local_step_dir(local_dir_, pick.run, pick.step).string();
  log_.print("Resume: local step " + std::to_string(pick.step) + " of run " + pick.run + " (" + local_choice_ +
             "): every rank's part found and verified: " + levels_text(pick.source) + "; newer than " + fs_text +
             (pick.passed_over.empty() ? "" : "; passed over " + pick.passed_over) + others + "\n");
  return local_choice_;
}

ResumePoint Checkpointer::Impl::load_local(Model& model, Optimizer& opt) {
  const int me = grid_.rank(), world = grid_.shape().size();
  const std::string where = "local step " + local_choice_ + ": ";
  PartImage part;                               // this rank's
  std::map<int, std::vector<unsigned char>> outgoing;  // owner → the part this rank reads for it
  // Reads first, agreed, so that no rank waits on a transfer that a failed read never sends.
  agree(grid_.comm(), [&] {
    for (int r = 0; r < world; ++r) {
      const LocalSource& src = local_sources_[static_cast<std::size_t>(r)];
      if (src.reader != me) continue;
      try {
        read_part_file(src.path, r == me ? part.buffer() : outgoing[r]);
      } catch (const std::exception& e) {
        throw Error(where + e.what() + " (it was verified a moment ago)");
      }
    }
  });
  std::vector<MPI_Request> reqs;
  for (auto& [owner, bytes] : outgoing) post_send(local_comm_, bytes, owner, 1, reqs);
  const LocalSource& mine = local_sources_[static_cast<std::size_t>(me)];
  if (mine.reader != me) {
    part.buffer().resize(mine.bytes);
    post_recv(local_comm_, part.buffer(), mine.reader, 1, reqs);
  }
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  outgoing.clear();
  // Every blob checked before any is restored: a failure leaves the model as it was on every rank.
  const auto tensors = entries(model, opt);
  agree(grid_.comm(), [&] {
    try {
      part.parse();
      if (part.header().rank != me || part.header().fingerprint != fingerprint(model, opt))
        throw Error("the part restored on rank " + std::to_string(me) + " is rank " + std::to_string(part.header().rank) + "'s");
      for (const auto& e : tensors)
        if (e.local.defined() && part.find(e.name).second != e.local.nbytes())
          throw Error(e.name + " holds " + std::to_string(part.find(e.name).second) + " bytes, this rank's " + std::to_string(e.local.nbytes()));
    } catch (const std::runtime_error& e) {
      throw Error(where + e.what());
    }
  });
  restore_part(part, tensors, opt);
  const PartHeader& h = part.header();
  ResumePoint at{h.step, h.sample_index, {}};
  for (const auto& name : part.names())
    if (name.starts_with("/train/")) {
      const auto [p, n] = part.find(name);
      const auto* values = reinterpret_cast<const double*>(p);
      at.train.emplace_back(name.substr(7), std::vector<double>(values, values + n / sizeof(double)));
    }
  opt.set_steps(h.optim_steps);
  lineage_ = {h.run_id, h.branched_from};
  start_step_ = h.step;
  claim_lineage(true);
  log_.print("Resumed from local step " + std::to_string(h.step) + " (" + local_choice_ + ") at step " + std::to_string(h.step) +
             " (global sample index " + std::to_string(h.sample_index) + ")\n");
  return at;
}

// Copies a checked part into the live state: every tensor this rank holds, the error-feedback
// residuals, the RNG, and the tokenizer the run carries.
void Checkpointer::Impl::restore_part(const PartImage& part, const std::vector<Entry>& tensors, Optimizer& opt) {
  torch::NoGradGuard no_grad;
  auto host = [&](const std::string& name, const torch::Tensor& like) {
    const auto [p, n] = part.find(name);
    return torch::from_blob(const_cast<unsigned char*>(p), like.sizes(), like.options().device(torch::kCPU));
  };
  for (const auto& e : tensors)
    if (e.local.defined()) e.local.detach().copy_(host(e.name, e.local));
  for (auto& [name, values] : opt.rank_state()) values.copy_(host("/comm/error_feedback/" + name, values));
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
  gen.set_state(host("/rng/cpu", rng).clone());
  if (!part.header().tokenizer_name.empty()) {
    TokenizerRecord t{part.header().tokenizer_name, ""};
    for (const auto& name : part.names())
      if (name == "/tokenizer/model") {
        const auto [p, n] = part.find(name);
        t.model.assign(reinterpret_cast<const char*>(p), n);
      }
    tokenizer_ = t;
  }
}

}  // namespace gridtrain
