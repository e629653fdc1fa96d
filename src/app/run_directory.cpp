#include "gridtrain/app/run_directory.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "gridtrain/checkpoint/checkpoint_dir.hpp"
#include "gridtrain/comm/agree.hpp"
#include "gridtrain/util/error.hpp"

namespace fs = std::filesystem;

namespace gridtrain {
namespace {

std::string host_name() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host;
}

std::string slurm_job() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id ? id : "";
}

// Whether pid is a live process: it exists and is no zombie (a killed rank whose parent has not
// reaped it, common in containers whose init does not reap).
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const auto close = line.rfind(')');       // "pid (comm) S ...": the state follows the name
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// key=value lines of a lock file.
std::map<std::string, std::string> read_lock(const fs::path& path) {
  std::map<std::string, std::string> fields;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  return fields;
}

// Why the lock's holder is gone ("" while it may still run).
std::string stale_because(const std::map<std::string, std::string>& lock) {
  const auto get = [&](const char* key) { return lock.contains(key) ? lock.at(key) : std::string(); };
  if (!slurm_job().empty() && get("slurm_job") == slurm_job()) return "left by this Slurm job before a requeue";
  if (get("host") == host_name()) {
    const long pid = std::strtol(get("pid").c_str(), nullptr, 10);
    if (pid > 0 && !running(static_cast<pid_t>(pid))) return "process " + get("pid") + " is no longer running";
  }
  return "";
}

// Creates dir/gridtrain.lock for this run, taking over a stale one. Returns its path.
std::string take_lock(const fs::path& dir, const std::string& key, Log& log) {
  const fs::path path = dir / "gridtrain.lock";
  const std::string text = "host=" + host_name() + "\npid=" + std::to_string(getpid()) + "\nslurm_job=" + slurm_job() + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      ::close(fd);
      if (!ok) throw Error(key + " = " + dir.string() + ": cannot write " + path.string() + " (" + std::strerror(errno) + ")");
      return path.string();
    }
    if (errno != EEXIST)
      throw Error(key + " = " + dir.string() + " cannot be written: " + path.string() + ": " + std::strerror(errno) +
                  "; valid: a writable directory");
    const auto lock = read_lock(path);
    const std::string why = stale_because(lock);
    if (why.empty()) {
      const auto get = [&](const char* k) { return lock.contains(k) ? lock.at(k) : std::string("?"); };
      throw Error(key + " = " + dir.string() + " is in use by another run: " + path.string() + " is held by PID " +
                  get("pid") + " on host " + get("host") +
                  (get("slurm_job").empty() ? "" : " (Slurm job " + get("slurm_job") + ")") +
                  ". Use another directory, or delete the lock file if that run is gone");
    }
    log.print("Taking over the stale lock " + path.string() + " (" + why + ")\n");
    fs::remove(path);
  }
  throw Error(key + " = " + dir.string() + ": another run took " + path.string() + " at the same time");
}

}  // namespace

RunDirectories::RunDirectories(const Config& cfg, MPI_Comm world, Log& log) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  agree(world, [&] {
    if (rank != 0) return;
    try {
      claim(cfg, log);
    } catch (...) {
      release();
      throw;
    }
  });
}

void RunDirectories::claim(const Config& cfg, Log& log) {
  const bool checkpoints = cfg.checkpoint.enabled();
  std::vector<std::pair<std::string, fs::path>> dirs{{"output.dir", cfg.output.dir}};
  if (checkpoints) dirs.emplace_back("checkpoint.dir", cfg.checkpoint.dir);
  for (const auto& [key, dir] : dirs) {
    if (fs::exists(dir) && !fs::is_directory(dir))
      throw Error(key + " = " + dir.string() + " exists and is not a directory; valid: a directory (created if missing)");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(key + " = " + dir.string() + " cannot be created: " + ec.message());
    if (locks_.empty() || !fs::equivalent(dir, fs::path(locks_.front()).parent_path()))
      locks_.push_back(take_lock(dir, key, log));
  }
  if (cfg.checkpoint.resume.mode != Resume::Mode::None) return;  // continuing (auto) or branching from a given file
  // A fresh run: what another run left here would be overwritten or mixed with this run's files.
  std::vector<fs::path> theirs;
  const fs::path metrics = fs::path(cfg.output.dir) / "metrics.jsonl";
  if (fs::exists(metrics) && fs::file_size(metrics) > 0) theirs.push_back(metrics);
  for (const auto& e : fs::directory_iterator(cfg.output.dir))  // output.tensorboard's event files
    if (e.path().filename().string().starts_with("events.out.tfevents.")) theirs.push_back(e.path());
  if (checkpoints) {
    for (const auto& p : list_checkpoints(cfg.checkpoint.dir)) theirs.push_back(p);
    if (fs::exists(fs::path(cfg.checkpoint.dir) / "latest")) theirs.push_back(fs::path(cfg.checkpoint.dir) / "latest");
  }
  if (theirs.empty()) return;
  if (!cfg.output.overwrite)
    throw Error("output.dir = " + cfg.output.dir + (checkpoints ? ", checkpoint.dir = " + cfg.checkpoint.dir : "") +
                ": another run's files are there (" + theirs.front().string() +
                (theirs.size() > 1 ? " and " + std::to_string(theirs.size() - 1) + " more" : "") +
                "); a fresh run would overwrite them. Continue that run with checkpoint.resume = auto, replace "
                "it with output.overwrite = true, or choose another output.dir / checkpoint.dir");
  for (const auto& p : theirs) {
    log.print("output.overwrite = true: deleting " + p.string() + "\n");
    fs::remove(p);
  }
}

RunDirectories::~RunDirectories() { release(); }

void RunDirectories::release() {
  for (const auto& lock : locks_) {
    std::error_code ec;
    fs::remove(lock, ec);
  }
  locks_.clear();
}

}  // namespace gridtrain
