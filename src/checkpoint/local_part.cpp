#include "gridtrain/checkpoint/local_part.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "gridtrain/checkpoint/checkpoint_file.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace gridtrain {

// The header's JSON: its fields by name (nlohmann's to_json/from_json).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PartHeader, run_id, branched_from, slurm_job, checkpoint_dir, step, rank, world,
                                   fingerprint, sample_index, epoch, optim_steps, optim_type, tokenizer_name)

namespace {

constexpr char kMagic[8] = {'G', 'T', 'P', 'A', 'R', 'T', '0', '1'};
constexpr std::size_t kPrefix = sizeof kMagic + sizeof(std::uint64_t);  // magic, header length

// The checksum of the first n bytes (a multiple of 4) of data: xsum64 over them as 32-bit words.
std::uint64_t checksum(const unsigned char* data, std::size_t n) {
  const std::vector<hsize_t> words{n / 4};
  return xsum64(data, DType::F32, words, Slab::all(words));
}

void put_u64(unsigned char* at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t get_u64(const unsigned char* at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

[[noreturn]] void os_error(const std::string& what, const fs::path& path) {
  throw std::system_error(errno, std::generic_category(), what + " " + path.string());
}

}  // namespace

void PartImage::begin(const PartHeader& header, const std::vector<std::pair<std::string, std::size_t>>& blobs) {
  header_ = header;
  json j = header;
  j["blobs"] = json::array();
  for (const auto& [name, size] : blobs) j["blobs"].push_back({name, size});
  const std::string text = j.dump();
  blobs_.clear();
  std::size_t at = kPrefix + text.size();
  for (const auto& [name, size] : blobs) {
    blobs_.push_back({name, {at, size}});
    at += size;
  }
  bytes_.resize(at);  // the buffer of the previous save is reused: no allocation once it is large enough
  std::memcpy(bytes_.data(), kMagic, sizeof kMagic);
  put_u64(bytes_.data() + sizeof kMagic, text.size());
  std::memcpy(bytes_.data() + kPrefix, text.data(), text.size());
}

unsigned char* PartImage::blob(std::size_t i) { return bytes_.data() + blobs_.at(i).second.first; }

void PartImage::seal() {
  bytes_.resize((bytes_.size() + 3) / 4 * 4, 0);
  const std::uint64_t sum = checksum(bytes_.data(), bytes_.size());
  bytes_.resize(bytes_.size() + 8);
  put_u64(bytes_.data() + bytes_.size() - 8, sum);
}

void PartImage::parse() {
  const std::size_t n = bytes_.size();
  if (n < kPrefix + 8 || std::memcmp(bytes_.data(), kMagic, sizeof kMagic) != 0)
    throw std::runtime_error("not a gridtrain local part (no GTPART01 magic; truncated?)");
  if ((n - 8) % 4 != 0 || checksum(bytes_.data(), n - 8) != get_u64(bytes_.data() + n - 8))
    throw std::runtime_error("checksum mismatch (xsum64 of its " + std::to_string(n) + " bytes)");
  const std::uint64_t length = get_u64(bytes_.data() + sizeof kMagic);
  if (length > n - kPrefix - 8) throw std::runtime_error("header length past the end of the part");
  try {
    const json j = json::parse(bytes_.begin() + kPrefix, bytes_.begin() + static_cast<std::ptrdiff_t>(kPrefix + length));
    header_ = j.get<PartHeader>();
    blobs_.clear();
    std::size_t at = kPrefix + length;
    for (const auto& b : j.at("blobs")) {
      const auto size = b.at(1).get<std::size_t>();
      blobs_.push_back({b.at(0).get<std::string>(), {at, size}});
      at += size;
    }
    if (at > n - 8) throw std::runtime_error("its blobs run past the end of the part");
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("unreadable header: ") + e.what());
  }
}

std::pair<const unsigned char*, std::size_t> PartImage::find(const std::string& name) const {
  for (const auto& [blob, where] : blobs_)
    if (blob == name) return {bytes_.data() + where.first, where.second};
  throw std::runtime_error("holds no " + name);
}

std::vector<std::string> PartImage::names() const {
  std::vector<std::string> out;
  for (const auto& b : blobs_) out.push_back(b.first);
  return out;
}

fs::path local_step_dir(const fs::path& local, const std::string& run_id, long long step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", step);
  return local / ("run-" + run_id) / name;
}

std::string part_name(int owner, int holder) {
  char name[48];
  if (owner == holder)
    std::snprintf(name, sizeof name, "rank-%05d.part", owner);
  else
    std::snprintf(name, sizeof name, "rank-%05d.partner-%05d.part", owner, holder);
  return name;
}

std::pair<int, int> part_ranks(const fs::path& p) {
  const std::string n = p.filename().string();
  if (!n.starts_with("rank-") || !n.ends_with(".part")) return {-1, -1};
  const char* at = n.data() + 5;
  const char* end = n.data() + n.size() - 5;
  int owner = -1, holder = -1;
  auto [ptr, ec] = std::from_chars(at, end, owner);
  if (ec != std::errc() || owner < 0) return {-1, -1};
  if (ptr == end) return {owner, owner};
  const std::string_view rest(ptr, static_cast<std::size_t>(end - ptr));
  if (!rest.starts_with(".partner-")) return {-1, -1};
  auto [p2, ec2] = std::from_chars(ptr + 9, end, holder);
  if (ec2 != std::errc() || p2 != end || holder < 0 || holder == owner) return {-1, -1};
  return {owner, holder};
}

int partner_of(int rank, int world, int ranks_per_node) { return (rank + ranks_per_node) % world; }

namespace {
constexpr std::size_t kChunk = std::size_t{1} << 30;  // bytes per message: MPI counts are int
}

void post_send(MPI_Comm comm, const std::vector<unsigned char>& bytes, int peer, int tag, std::vector<MPI_Request>& reqs) {
  for (std::size_t at = 0; at < bytes.size(); at += kChunk, ++tag) {
    reqs.emplace_back();
    MPI_Isend(bytes.data() + at, static_cast<int>(std::min(kChunk, bytes.size() - at)), MPI_BYTE, peer, tag, comm, &reqs.back());
  }
}

void post_recv(MPI_Comm comm, std::vector<unsigned char>& bytes, int peer, int tag, std::vector<MPI_Request>& reqs) {
  for (std::size_t at = 0; at < bytes.size(); at += kChunk, ++tag) {
    reqs.emplace_back();
    MPI_Irecv(bytes.data() + at, static_cast<int>(std::min(kChunk, bytes.size() - at)), MPI_BYTE, peer, tag, comm, &reqs.back());
  }
}

void exchange_bytes(MPI_Comm comm, const std::vector<unsigned char>& out, int dest, std::vector<unsigned char>& in,
                    int source) {
  unsigned long long n = out.size(), m = 0;
  MPI_Sendrecv(&n, 1, MPI_UNSIGNED_LONG_LONG, dest, 0, &m, 1, MPI_UNSIGNED_LONG_LONG, source, 0, comm, MPI_STATUS_IGNORE);
  in.resize(m);
  std::vector<MPI_Request> reqs;
  post_recv(comm, in, source, 1, reqs);
  post_send(comm, out, dest, 1, reqs);
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
}

void write_part_file(const fs::path& path, const std::vector<unsigned char>& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) os_error("cannot create", tmp);
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = code;
      os_error("cannot write", tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) os_error("cannot close", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) os_error("cannot rename to " + path.string() + ":", tmp);
}

void read_part_file(const fs::path& path, std::vector<unsigned char>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) os_error("cannot open", path);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
    ::close(fd);
    os_error("cannot seek", path);
  }
  out.resize(static_cast<std::size_t>(size));
  for (std::size_t done = 0; done < out.size();) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      if (n == 0) errno = EIO;  // shorter than it was a moment ago
      os_error("cannot read", path);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

}  // namespace gridtrain
