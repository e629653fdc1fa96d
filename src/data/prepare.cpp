#include "gridtrain/data/prepare.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <openssl/evp.h>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

constexpr std::uint64_t kBuffer = 64ULL << 20;  // bytes read and written at a time

std::string hex(const unsigned char* digest, unsigned len) {
  std::string out;
  char byte[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    out += byte;
  }
  return out;
}

// An incremental SHA-256.
class Digest {
 public:
  Digest() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void add(const void* data, std::size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  std::string hex_digest() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_.get(), d, &len);
    return hex(d, len);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// Copies input bytes [from, from + n) into a new contiguous uint8 dataset group/tokens,
// kBuffer at a time, and adds them to the digest.
void write_split(hid_t file, int in, const std::string& group, std::uint64_t from, std::uint64_t n, Digest& digest) {
  H5Id g(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "cannot create group " + group);
  const hsize_t size = n;
  H5Id space(H5Screate_simple(1, &size, nullptr), "H5Screate_simple");
  H5Id ds(H5Dcreate2(g, "tokens", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          "cannot create dataset " + group + "/tokens");
  std::vector<unsigned char> buf(std::min(n, kBuffer));
  for (std::uint64_t at = 0; at < n;) {
    const hsize_t count = std::min<std::uint64_t>(buf.size(), n - at), offset = at;
    const ssize_t got = ::pread(in, buf.data(), count, static_cast<off_t>(from + at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error(std::string("reading the input failed: ") + (got < 0 ? std::strerror(errno) : "it shrank"));
    const hsize_t len = static_cast<hsize_t>(got);
    digest.add(buf.data(), len);
    H5Id mem(H5Screate_simple(1, &len, nullptr), "H5Screate_simple");
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &offset, nullptr, &len, nullptr);
    if (H5Dwrite(ds, H5T_NATIVE_UCHAR, mem, space, H5P_DEFAULT, buf.data()) < 0)
      throw std::runtime_error("cannot write " + group + "/tokens");
    at += len;
  }
}

struct ShardPlan {
  std::uint64_t train_from, train_n, val_from, val_n;  // input byte ranges
};

// Writes one shard file (via .tmp + rename); returns the digest of its source bytes.
std::string write_shard(const PrepareOptions& o, int in, const std::string& path, const ShardPlan& p,
                        std::uint64_t source_bytes, int k, int shards) {
  const std::string tmp = path + ".tmp";
  Digest digest;
  try {
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "cannot create '" + tmp + "'");
    write_split(file, in, "/train", p.train_from, p.train_n, digest);
    write_split(file, in, "/val", p.val_from, p.val_n, digest);
    const std::string sha = digest.hex_digest();
    h5_write_attr(file, "format", std::string("gridtrain-tokens"));
    h5_write_attr(file, "tokenizer", std::string("bytes"));
    h5_write_attr(file, "vocab_size", 256LL);
    h5_write_attr(file, "source", std::filesystem::path(o.input).filename().string());
    h5_write_attr(file, "source_bytes", static_cast<long long>(source_bytes));
    h5_write_attr(file, "sha256", sha);
    h5_write_attr(file, "shard", static_cast<long long>(k));
    h5_write_attr(file, "shards", static_cast<long long>(shards));
    file = H5Id();  // closed before the rename
    std::filesystem::rename(tmp, path);
    return sha;
  } catch (const std::runtime_error& e) {
    std::filesystem::remove(tmp);
    throw Error("prepare: writing '" + path + "' failed: " + e.what());
  }
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  Digest d;
  d.add(bytes.data(), bytes.size());
  return d.hex_digest();
}

std::string shard_name(int k) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%06d.h5", k);
  return name;
}

PrepareReport prepare_text(const PrepareOptions& o, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  PrepareReport r;
  agree(comm, [&] {
    if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0))
      throw Error("prepare: --val-fraction " + std::to_string(o.val_fraction) + " is invalid; valid: 0 < F < 1");
    std::error_code ec;
    const auto size = std::filesystem::file_size(o.input, ec);
    if (ec) throw Error("prepare: cannot read input file '" + o.input + "': " + ec.message());
    if (size < 2) throw Error("prepare: input file '" + o.input + "' is empty or has fewer than 2 bytes");
    r.source_bytes = size;
  });
  r.val_tokens = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.val_fraction * static_cast<double>(r.source_bytes)));
  r.train_tokens = r.source_bytes - r.val_tokens;
  r.shards = o.shard_size == 0 ? 1 : static_cast<int>((r.source_bytes + o.shard_size - 1) / o.shard_size);
  std::vector<std::string> digests(static_cast<std::size_t>(r.shards));
  agree(comm, [&] {
    const int in = ::open(o.input.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) throw Error("prepare: cannot read input file '" + o.input + "': " + std::strerror(errno));
    const std::unique_ptr<int, void (*)(int*)> closer(new int(in), [](int* fd) { ::close(*fd), delete fd; });
    if (o.shard_size > 0) std::filesystem::create_directories(o.output);
    else if (const auto parent = std::filesystem::path(o.output).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent);
    for (int k = rank; k < r.shards; k += ranks) {
      const auto [t0, t1] = share(r.train_tokens, k, r.shards);
      const auto [v0, v1] = share(r.val_tokens, k, r.shards);
      const std::string path = o.shard_size > 0 ? (std::filesystem::path(o.output) / shard_name(k)).string() : o.output;
      digests[static_cast<std::size_t>(k)] =
          write_shard(o, in, path, {t0, t1 - t0, r.train_tokens + v0, v1 - v0}, r.source_bytes, k, r.shards);
    }
  });
  std::string joined;  // every shard's digest, in order, on every rank
  for (int k = 0; k < r.shards; ++k)
    joined += broadcast_text(digests[static_cast<std::size_t>(k)], comm, k % ranks) + "\n";
  r.sha256 = r.shards == 1 ? joined.substr(0, joined.size() - 1) : sha256_hex(joined);
  return r;
}

}  // namespace gridtrain
