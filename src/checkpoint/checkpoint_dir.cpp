#include "gridtrain/checkpoint/checkpoint_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>

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

// The checkpoint to resume from in dir: the one `latest` names unless a newer step file of the
// same run passes its checksums (a pointer that a full disk or a kill kept from moving on must not
// send the run back, nor let it rewrite and prune the newer file); without a usable `latest`, the
// newest step file that passes. Candidates in that order; the first that passes wins.
std::optional<ResumeChoice> newest_valid(const fs::path& dir, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string listing;  // line 1: latest's problem (empty if none); line 2: its file (or empty); then candidates
  if (rank == 0) {
    const Pointer latest = read_pointer(dir / "latest");
    listing = latest.problem + "\n" + (latest.name.empty() ? "" : (dir / latest.name).string()) + "\n";
    const auto files = list_checkpoints(dir);
    std::string newer, older;
    const long long at = latest.name.empty() ? -1 : checkpoint_step(latest.name);
    const std::string run = latest.name.empty() ? "" : checkpoint_run(dir / latest.name);
    for (const auto& f : files) {
      if (f.filename() == latest.name) continue;
      const bool ahead = at >= 0 && checkpoint_step(f) > at && !run.empty() && checkpoint_run(f) == run;
      (ahead ? newer : older) += f.string() + "\n";
    }
    listing += newer + (latest.name.empty() ? "" : (dir / latest.name).string() + "\n") + older;
  }
  listing = broadcast_text(listing, comm);
  std::vector<std::string> lines;
  for (std::size_t at = 0, end; (end = listing.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(listing.substr(at, end - at));
  const std::string latest_problem = lines[0], latest_file = lines[1];
  if (lines.size() == 2) return std::nullopt;  // no checkpoint file at all
  std::string skipped;
  for (std::size_t i = 2; i < lines.size(); ++i) {
    const auto problem = checkpoint_problem(lines[i], comm);
    if (!problem) {
      const auto name = [](const std::string& f) { return fs::path(f).filename().string(); };
      if (lines[i] == latest_file && skipped.empty()) return ResumeChoice{lines[i], "the checkpoint 'latest' names"};
      if (!latest_file.empty() && checkpoint_step(lines[i]) > checkpoint_step(latest_file))
        return ResumeChoice{lines[i], "'latest' names " + name(latest_file) + ", but " + name(lines[i]) +
                                          ", a newer checkpoint of the same run, is complete and passes its checksums "
                                          "(the pointer was not moved on: a full disk or a kill while it was replaced)"};
      return ResumeChoice{lines[i], (latest_problem.empty() ? std::string() : latest_problem + "; ") + skipped +
                                        "falling back to the newest checkpoint that passes its checksums"};
    }
    skipped += fs::path(lines[i]).filename().string() + " is unusable: " + *problem + "; ";
  }
  throw Error("checkpoint.dir = " + dir.string() + " holds " + std::to_string(lines.size() - 2) +
              " checkpoint file(s) but none can be resumed from: " + skipped + (latest_problem.empty() ? "" : latest_problem + "; ") +
              "refusing to start fresh over them. Move them away, or name a checkpoint with --restart");
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
  if (target.filename() != "latest") return ResumeChoice{resume, "checkpoint.resume names it"};
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
  return ResumeChoice{(target.parent_path() / name).string(), "'" + resume + "' names it"};
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
