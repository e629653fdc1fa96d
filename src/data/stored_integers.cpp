#include "gridtrain/data/stored_integers.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

struct StoredIntegers::Files {
  struct Open {
    Part part;
    int fd = -1;
    std::uint64_t first = 0;  // index of the part's first value in the sequence
  };
  std::vector<Open> open;
  ~Files() {
    for (const auto& o : open) ::close(o.fd);
  }
};

StoredIntegers::StoredIntegers(std::vector<Part> parts) {
  auto files = std::make_shared<Files>();
  for (auto& p : parts) {
    const int fd = ::open(p.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot open '" + p.file + "': " + std::strerror(errno));
    files->open.push_back({std::move(p), fd, size_});
    size_ += files->open.back().part.count;
  }
  files_ = std::move(files);
}

namespace {

// Reads exactly `bytes` bytes at `offset` (pread may return less, or be interrupted).
void read_fully(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& file) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw Error("reading '" + file + "' failed: " + (got < 0 ? std::strerror(errno) : "file too short"));
    p += got;
    bytes -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

// Stored value i of raw (little-endian, `width` bytes), as a signed or unsigned 64-bit value.
template <class T>
T stored(const unsigned char* raw, std::size_t i, int width, bool is_signed) {
  std::uint64_t u = 0;
  std::memcpy(&u, raw + i * static_cast<std::size_t>(width), static_cast<std::size_t>(width));
  if (is_signed && width < 8 && (u >> (8 * width - 1)) != 0) u |= ~std::uint64_t{0} << (8 * width);  // sign-extend
  return static_cast<T>(u);
}

// Calls fn(part, first value within the part, count) for the pieces of [start, start + n).
template <class Open, class Fn>
void for_pieces(const std::vector<Open>& open, std::uint64_t start, std::uint64_t n, Fn&& fn) {
  auto it = std::upper_bound(open.begin(), open.end(), start, [](std::uint64_t s, const Open& o) { return s < o.first; });
  for (--it; n > 0; ++it) {
    const std::uint64_t in = start - it->first, take = std::min(n, it->part.count - in);
    if (take > 0) fn(*it, in, take);
    start += take;
    n -= take;
  }
}

}  // namespace

void StoredIntegers::read(std::uint64_t start, std::size_t n, std::int32_t* out) const {
  std::vector<unsigned char> raw;
  for_pieces(files_->open, start, n, [&](const Files::Open& o, std::uint64_t in, std::uint64_t take) {
    const auto w = static_cast<std::size_t>(o.part.width);
    raw.resize(take * w);
    read_fully(o.fd, raw.data(), raw.size(), o.part.offset + in * w, o.part.file);
    for (std::size_t i = 0; i < take; ++i) *out++ = stored<std::int32_t>(raw.data(), i, o.part.width, o.part.is_signed);
  });
}

std::string StoredIntegers::first_outside(std::uint64_t begin, std::uint64_t end, long long vocab) const {
  constexpr std::uint64_t kChunk = 1 << 20;  // values per read: 8 MiB at the widest
  std::string bad;
  std::vector<unsigned char> raw;
  for_pieces(files_->open, begin, end - begin, [&](const Files::Open& o, std::uint64_t in, std::uint64_t take) {
    const Part& p = o.part;
    const bool cannot_exceed = !p.is_signed && p.width < 8 && (1ULL << (8 * p.width)) <= static_cast<unsigned long long>(vocab);
    for (std::uint64_t at = 0; at < take && bad.empty() && !cannot_exceed; at += kChunk) {
      const std::uint64_t count = std::min(kChunk, take - at);
      raw.resize(count * static_cast<std::uint64_t>(p.width));
      read_fully(o.fd, raw.data(), raw.size(), p.offset + (in + at) * static_cast<std::uint64_t>(p.width), p.file);
      for (std::size_t i = 0; i < count && bad.empty(); ++i) {
        if (p.is_signed) {
          const auto t = stored<std::int64_t>(raw.data(), i, p.width, true);
          if (t < 0 || t >= vocab) bad = std::to_string(t);
        } else {
          const auto t = stored<std::uint64_t>(raw.data(), i, p.width, false);
          if (t >= static_cast<std::uint64_t>(vocab)) bad = std::to_string(t);
        }
      }
    }
  });
  return bad;
}

}  // namespace gridtrain
