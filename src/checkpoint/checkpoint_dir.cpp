#include "gridtrain/checkpoint/checkpoint_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/util/error.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

// The checkpoint file name a `latest` pointer holds, or why it holds none.
struct Pointer {
  std::string name, problem;
};

Pointer read_pointer(const fs::path& latest) {
  const std::string file = latest.string();
  std::ifstream in(latest);
  if (!in) {
    const int code = errno;
    return {"", fs::exists(latest) ? file + " is unreadable (" + std::strerror(code) + ")" : file + " is missing"};
  }
  std::string name;
  in >> name;
  if (name.empty()) return {"", file + " is empty"};
  if (name.find('/') != std::string::npos || checkpoint_step(name) < 0)
    return {"", file + " holds '" + name + "', which is not a checkpoint file name"};
  if (!fs::exists(latest.parent_path() / name)) return {"", file + " names " + name + ", which does not exist"};
  return {name, ""};
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

// The lines of rank 0's listing (scan, requeue_listing), each ended by a newline.
std::vector<std::string> lines_of(const std::string& listing) {
  std::vector<std::string> lines;
  for (std::size_t at = 0, end; (end = listing.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(listing.substr(at, end - at));
  return lines;
}

// What rank 0 finds in dir, one item a line: latest's problem (empty if none), the file it names
// (empty if none), the other runs' files skipped (a note, empty if none), then the candidates.
//
// The directory's run is the one of the file `latest` names; without a usable `latest`, the one
// run its step files belong to, and an Error when they belong to several (which one the directory
// continues would be a guess). Candidates are that run's step files (and those whose run cannot be
// read: they fail their checks and are named): first the ones newer than `latest`'s (a pointer
// that a full disk or a kill kept from moving on must not send the run back, nor let it rewrite
// and prune the newer file), then `latest`'s, then the older ones, newest first. Another run's
// files are never candidates.
std::string scan(const fs::path& dir) {
  const Pointer latest = read_pointer(dir / "latest");
  const auto files = list_checkpoints(dir);
  std::vector<std::string> runs;
  for (const auto& f : files) runs.push_back(checkpoint_run(f));
  std::string run = latest.name.empty() ? "" : checkpoint_run(dir / latest.name);
  if (run.empty()) {
    std::map<std::string, std::string> by_run;  // run → its files
    for (std::size_t i = 0; i < files.size(); ++i)
      if (!runs[i].empty()) by_run[runs[i]] += (by_run[runs[i]].empty() ? "" : ", ") + files[i].filename().string();
    if (by_run.size() > 1) {
      std::string list;
      for (const auto& [id, names] : by_run) list += (list.empty() ? "run " : "; run ") + id + ": " + names;
      throw Error("checkpoint.dir = " + dir.string() + ": " + (latest.problem.empty() ? "'latest' names no run" : latest.problem) +
                  ", and its checkpoints belong to " + std::to_string(by_run.size()) + " runs (" + list +
                  "); resuming would have to guess which run this directory continues. Name the checkpoint to "
                  "continue with --restart FILE, or move the other runs' files out of " + dir.string());
    }
    if (!by_run.empty()) run = by_run.begin()->first;
  }
  const long long at = latest.name.empty() ? -1 : checkpoint_step(latest.name);
  std::string newer, older, skipped;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    if (f.filename() == latest.name) continue;
    if (!runs[i].empty() && runs[i] != run) {
      skipped += (skipped.empty() ? "" : ", ") + f.filename().string() + " (run " + runs[i] + ")";
      continue;
    }
    (at >= 0 && checkpoint_step(f) > at && !runs[i].empty() ? newer : older) += f.string() + "\n";
  }
  if (!skipped.empty())
    skipped = "skipped other runs' checkpoints " + skipped + ", never adopted by run " + run;
  const std::string pointed = latest.name.empty() ? "" : (dir / latest.name).string();
  return latest.problem + "\n" + pointed + "\n" + skipped + "\n" + newer + (pointed.empty() ? "" : pointed + "\n") + older;
}

// The checkpoint to resume from in dir: the first of scan()'s candidates that passes its checks.
std::optional<ResumeChoice> newest_valid(const fs::path& dir, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string listing;
  agree(comm, [&] {
    if (rank == 0) listing = scan(dir);
  });
  listing = broadcast_text(listing, comm);
  const std::vector<std::string> lines = lines_of(listing);
  const std::string latest_problem = lines[0], latest_file = lines[1], others = lines[2];
  if (lines.size() == 3) return std::nullopt;  // no checkpoint file at all (the directory's run has one if any exists)
  const std::string note = others.empty() ? "" : "; " + others;
  std::string unusable;
  for (std::size_t i = 3; i < lines.size(); ++i) {
    const auto problem = checkpoint_problem(lines[i], comm);
    if (!problem) {
      if (lines[i] == latest_file && unusable.empty()) return ResumeChoice{lines[i], "the checkpoint 'latest' names" + note, true};
      if (!latest_file.empty() && checkpoint_step(lines[i]) > checkpoint_step(latest_file))
        return ResumeChoice{lines[i], "'latest' names " + file_name(latest_file) + ", but " + file_name(lines[i]) +
                                          ", a newer checkpoint of the same run, is complete and passes its checksums "
                                          "(the pointer was not moved on: a full disk or a kill while it was replaced)" + note,
                            true};
      return ResumeChoice{lines[i], (latest_problem.empty() ? std::string() : latest_problem + "; ") + unusable +
                                        "falling back to the newest checkpoint that passes its checksums" + note,
                          true};
    }
    unusable += file_name(lines[i]) + " is unusable: " + *problem + "; ";
  }
  throw Error("checkpoint.dir = " + dir.string() + " holds " + std::to_string(lines.size() - 3) +
              " checkpoint file(s) but none can be resumed from: " + unusable +
              (latest_problem.empty() ? "" : latest_problem + "; ") + (others.empty() ? "" : others + "; ") +
              "refusing to start fresh over them. Move them away, or name a checkpoint with --restart");
}

// What a requeued Slurm job started with `--restart file` wrote before (rank 0): the first line
// describes it for the log, the others are its checkpoints in dir, newest first; "" when this is
// no requeue or the job wrote none. The job's files record it (slurm_job) and belong to the one
// lineage it began from `file`: that file's run continued past its step, or a branch of that run
// at that step (branched_from).
std::string requeue_listing(const fs::path& file, const fs::path& dir) {
  const std::string job = slurm_job_identity();
  const long long restarts = slurm_restart_count();
  if (job.empty() || restarts <= 0) return "";
  const CheckpointOrigin from = checkpoint_origin(file);
  if (from.run_id.empty() || from.step < 0) return "";
  const std::string at = from.run_id + "@" + std::to_string(from.step);
  std::string lineage, relation, files;
  for (const auto& f : list_checkpoints(dir)) {
    const CheckpointOrigin o = checkpoint_origin(f);
    if (o.slurm_job != job || o.run_id.empty() || (!lineage.empty() && o.run_id != lineage)) continue;
    const bool continued = o.run_id == from.run_id && checkpoint_step(f) > from.step;
    const bool branch = o.run_id != from.run_id && o.branched_from == at;
    if (!continued && !branch) continue;
    if (lineage.empty()) {
      lineage = o.run_id;
      relation = branch ? "a branch of run " + from.run_id + " at step " + std::to_string(from.step)
                        : "continuing run " + from.run_id + " from step " + std::to_string(from.step);
    }
    files += f.string() + "\n";
  }
  if (files.empty()) return "";
  return "this is Slurm job " + job + " requeued or relaunched (attempt " + std::to_string(restarts + 1) + "), whose earlier attempt "
         "started from " + file.string() + " as run " + lineage + " (" + relation + "): a requeue continues that "
         "run from its newest checkpoint instead of branching from " + file_name(file.string()) + " again\n" + files;
}

// The checkpoint a requeued job continues from (requeue_listing's newest that passes its checks),
// or nullopt when this is no requeue of a job that wrote any. Collective.
std::optional<ResumeChoice> requeued_job_choice(const fs::path& file, const fs::path& dir, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string listing;
  agree(comm, [&] {
    if (rank == 0) listing = requeue_listing(file, dir);
  });
  listing = broadcast_text(listing, comm);
  if (listing.empty()) return std::nullopt;
  const std::vector<std::string> lines = lines_of(listing);
  std::string unusable;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto problem = checkpoint_problem(lines[i], comm);
    if (!problem) return ResumeChoice{lines[i], lines[0] + (unusable.empty() ? "" : "; " + unusable), true};
    unusable += (unusable.empty() ? "" : "; ") + file_name(lines[i]) + " is unusable: " + *problem;
  }
  return ResumeChoice{file.string(), lines[0] + ", but none of its checkpoints passes its checks (" + unusable +
                                         "); starting from " + file.string() + " as its first attempt did"};
}

}  // namespace

std::string checkpoint_name(long long step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.h5", step);
  return name;
}

long long checkpoint_step(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.size() < 9 || !n.starts_with("step-") || !n.ends_with(".h5")) return -1;
  long long step = -1;
  const char* first = n.data() + 5;
  const char* last = n.data() + n.size() - 3;
  auto [ptr, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && ptr == last ? step : -1;
}

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (checkpoint_step(e.path()) >= 0) found.push_back(e.path());
  std::sort(found.begin(), found.end(),
            [](const fs::path& a, const fs::path& b) { return checkpoint_step(a) > checkpoint_step(b); });
  return found;
}

std::optional<std::string> checkpoint_problem(const std::string& path, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  auto failure = agree_on(comm, [&] {
    if (!fs::exists(path)) throw std::runtime_error("file not found");
    if (H5Fis_hdf5(path.c_str()) <= 0) throw std::runtime_error("not an HDF5 file (truncated or corrupt?)");
    auto file = CheckpointFile::open(path, MPI_COMM_SELF);
    file.check_header();
    const auto names = file.datasets();
    for (std::size_t i = static_cast<std::size_t>(rank); i < names.size(); i += static_cast<std::size_t>(size))
      file.verify(names[i]);
  });
  if (failure) return failure->message;
  return std::nullopt;
}

std::optional<ResumeChoice> choose_resume(const Resume& from, const std::string& dir, MPI_Comm comm) {
  if (from.mode == Resume::Mode::None) return std::nullopt;
  const bool automatic = from.mode == Resume::Mode::Auto;
  const std::string resume = automatic ? "auto" : from.path;
  const fs::path target = automatic ? fs::path(dir) : fs::path(from.path);
  if (automatic || fs::is_directory(target)) return newest_valid(target, comm);
  if (target.filename() != "latest") {
    if (auto own = requeued_job_choice(target, dir, comm)) return own;
    return ResumeChoice{resume, "checkpoint.resume names it"};
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string name;  // the file the pointer names, or "!" and why it names none
  if (rank == 0) {
    const Pointer p = read_pointer(target);
    name = p.name.empty() ? "!" + p.problem : p.name;
  }
  name = broadcast_text(name, comm);
  if (name.starts_with("!"))
    throw Error("checkpoint.resume = " + resume + ": " + name.substr(1) + "; valid: a checkpoint file, a directory "
                "of checkpoints, or its 'latest' pointer");
  // The pointer's directory, resolved as a directory is: a stale pointer (a full disk or a kill
  // kept it from moving on) must not send the run back to an older step of its own, which would
  // then make it a branch refused by its own newer file.
  auto choice = newest_valid(target.has_parent_path() ? target.parent_path() : fs::path("."), comm);
  if (!choice) throw Error("checkpoint.resume = " + resume + ": it names " + name + ", but its directory holds no checkpoint");
  choice->reason = "'" + resume + "': " + choice->reason;
  return choice;
}

std::string random_run_id() {
  std::random_device random;
  char id[17];
  std::snprintf(id, sizeof id, "%08x%08x", random(), random());
  return id;
}

std::string slurm_job_identity() {
  const char* id = std::getenv("SLURM_JOB_ID");
  if (id == nullptr || *id == '\0') return "";
  const char* cluster = std::getenv("SLURM_CLUSTER_NAME");
  return cluster != nullptr && *cluster != '\0' ? std::string(cluster) + ":" + id : std::string(id);
}

long long slurm_restart_count() {
  // SLURM_RESTART_COUNT: requeues; GRIDTRAIN_RELAUNCH: slurm/gridtrain.sbatch's relaunches of the
  // step inside the allocation. Either way an earlier attempt of this job ran.
  long long total = 0;
  for (const char* name : {"SLURM_RESTART_COUNT", "GRIDTRAIN_RELAUNCH"}) {
    const char* count = std::getenv(name);
    if (count == nullptr) continue;
    long long n = 0;
    const char* end = count + std::strlen(count);
    auto [ptr, ec] = std::from_chars(count, end, n);
    if (ec == std::errc() && ptr == end && n > 0) total += n;
  }
  return total;
}

CheckpointOrigin checkpoint_origin(const fs::path& path) {
  CheckpointOrigin origin;
  try {
    auto file = CheckpointFile::open(path.string(), MPI_COMM_SELF);
    const hid_t root = file.root();
    if (h5_has_attr(root, "run_id")) origin.run_id = h5_read_attr_string(root, "run_id");
    if (h5_has_attr(root, "branched_from")) origin.branched_from = h5_read_attr_string(root, "branched_from");
    if (h5_has_attr(root, "slurm_job")) origin.slurm_job = h5_read_attr_string(root, "slurm_job");
    if (h5_has_attr(root, "step")) origin.step = h5_read_attr_int(root, "step");
  } catch (const std::exception&) {
  }
  return origin;
}

std::string checkpoint_run(const fs::path& path) {
  try {
    auto file = CheckpointFile::open(path.string(), MPI_COMM_SELF);
    return h5_has_attr(file.root(), "run_id") ? h5_read_attr_string(file.root(), "run_id") : "";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace gridtrain
