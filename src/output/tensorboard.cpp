#include "gridtrain/output/tensorboard.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <boost/crc.hpp>

namespace gridtrain {
namespace fs = std::filesystem;
namespace {

// Protobuf wire format (https://protobuf.dev/programming-guides/encoding/): a key is
// (field << 3) | wire type; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void varint(std::string& out, std::uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>(v | 0x80);
  out += static_cast<char>(v);
}

void key(std::string& out, int field, int wire) { varint(out, static_cast<std::uint64_t>(field << 3 | wire)); }

template <class T>
void little_endian(std::string& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);  // x86-64 and aarch64 are little endian, as TFRecord
  out.append(b, sizeof v);
}

void bytes(std::string& out, int field, const std::string& b) {
  key(out, field, 2);
  varint(out, b.size());
  out += b;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary); Summary: value = 1 (repeated Value); Value: tag = 1 (string),
// simple_value = 2 (float).
std::string header_event() {
  std::string e;
  key(e, 1, 1), little_endian(e, wall_time());
  bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(long long step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    bytes(v, 1, tag);
    key(v, 2, 5), little_endian(v, static_cast<float>(value));
    bytes(summary, 1, v);
  }
  std::string e;
  key(e, 1, 1), little_endian(e, wall_time());
  key(e, 2, 0), varint(e, static_cast<std::uint64_t>(step));
  bytes(e, 5, summary);
  return e;
}

// The step of a serialized Event (0 where absent), and whether it is a file_version header.
struct EventInfo {
  long long step = 0;
  bool header = false;
  bool valid = true;
};

EventInfo inspect(const std::string& e) {
  EventInfo info;
  std::size_t at = 0;
  auto read_varint = [&](std::uint64_t& v) {
    v = 0;
    for (int shift = 0; at < e.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(e[at++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (at < e.size()) {
    std::uint64_t k = 0, v = 0;
    if (!read_varint(k)) return {0, false, false};
    const auto field = k >> 3;
    switch (k & 7) {
      case 0:
        if (!read_varint(v)) return {0, false, false};
        if (field == 2) info.step = static_cast<long long>(v);
        break;
      case 1: at += 8; break;
      case 5: at += 4; break;
      case 2:
        if (!read_varint(v)) return {0, false, false};
        at += v;
        if (field == 3) info.header = true;
        break;
      default: return {0, false, false};
    }
  }
  info.valid = at == e.size();
  return info;
}

// The records of a TFRecord file up to the first one that is truncated or fails its checksums.
std::vector<std::string> read_records(const fs::path& path, std::string* note) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read TensorBoard event file '" + path.string() + "'");
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < all.size()) {
    std::uint64_t n = 0;
    std::uint32_t crc_n = 0, crc_d = 0;
    const bool whole = all.size() - at >= 12 && (std::memcpy(&n, &all[at], 8), std::memcpy(&crc_n, &all[at + 8], 4),
                                                 n <= all.size() - at - 16);
    if (!whole || crc_n != masked_crc32c(&all[at], 8)) break;
    std::memcpy(&crc_d, &all[at + 12 + n], 4);
    if (crc_d != masked_crc32c(&all[at + 12], n)) break;
    records.push_back(all.substr(at + 12, n));
    at += 16 + n;
  }
  if (at < all.size() && note)
    *note += path.string() + ": dropped " + std::to_string(all.size() - at) + " bytes after the last whole record\n";
  return records;
}

std::string host_name() {
  char name[256] = "localhost";
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C (Castagnoli)
  crc.process_bytes(data, n);
  const std::uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  little_endian(r, static_cast<std::uint64_t>(data.size()));
  little_endian(r, masked_crc32c(r.data(), 8));
  r += data;
  little_endian(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, long long start_step, std::string* note) {
  fs::create_directories(dir);
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().starts_with("events.out.tfevents.")) old.push_back(e.path());
  std::sort(old.begin(), old.end());  // by creation time, which the names begin with
  // The events of steps <= start_step, once each (a crash between writing the new file and
  // removing the old ones leaves them twice).
  std::map<long long, std::string> kept;
  long long dropped = 0;
  for (const auto& p : start_step > 0 ? old : std::vector<fs::path>{})
    for (auto& r : read_records(p, note)) {
      const EventInfo e = inspect(r);
      if (!e.valid || e.header) continue;
      if (e.step <= start_step) kept.try_emplace(e.step, std::move(r));
      else ++dropped;
    }
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<long long>(wall_time())) + "." +
                            host_name() + ".gridtrain")).string();
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream fresh(tmp, std::ios::binary | std::ios::trunc);
    fresh << tfrecord(header_event());
    for (const auto& [step, r] : kept) fresh << tfrecord(r);
    if (!fresh.flush()) throw std::runtime_error("cannot write TensorBoard event file '" + tmp + "'");
  }
  fs::rename(tmp, path_);
  for (const auto& p : old)
    if (p != path_) fs::remove(p);
  if (dropped > 0 && note)
    *note += dir + ": dropped " + std::to_string(dropped) + " TensorBoard event(s) after step " +
             std::to_string(start_step) + " (written after the checkpoint this run resumes from)\n";
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot open TensorBoard event file '" + path_ + "' for writing");
}

void TensorBoardWriter::write(long long step, const Scalars& scalars) {
  out_ << tfrecord(scalars_event(step, scalars)) << std::flush;
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file '" + path_ + "'");
}

}  // namespace gridtrain
