#include "corpus_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/hf_tokenizer.hpp"
#include "gridtrain/data/indexed_dataset.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/sha256.hpp"

namespace gridtrain {
namespace {

constexpr std::uint64_t kBuffer = 16ULL << 20;  // tokens handled at a time

// The narrowest little-endian type that holds every id of a vocabulary.
struct StoredType {
  int width;
  hid_t h5;
};
StoredType stored_type(int vocab) {
  if (vocab <= 256) return {1, H5T_STD_U8LE};
  if (vocab <= 65536) return {2, H5T_STD_U16LE};
  return {4, H5T_STD_I32LE};
}

// Writes tokens [from, from + n) of src as a new contiguous dataset `name`, kBuffer at a time,
// and adds the bytes as stored to the digest.
void write_tokens(hid_t file, const std::string& name, const StoredIntegers& src, std::uint64_t from, std::uint64_t n,
                  StoredType type, Sha256& digest) {
  const hsize_t size = n;
  H5Id space(H5Screate_simple(1, &size, nullptr), "H5Screate_simple");
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id ds(H5Dcreate2(file, name.c_str(), type.h5, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), "cannot create dataset " + name);
  std::vector<std::int32_t> ids(std::min(n, kBuffer));
  std::vector<unsigned char> bytes;
  for (std::uint64_t at = 0; at < n;) {
    const hsize_t count = std::min<std::uint64_t>(ids.size(), n - at), offset = at;
    src.read(from + at, count, ids.data());
    bytes.resize(count * static_cast<std::size_t>(type.width));
    for (std::size_t i = 0; i < count; ++i)  // little-endian, as the dataset stores them
      for (int b = 0; b < type.width; ++b)
        bytes[i * static_cast<std::size_t>(type.width) + static_cast<std::size_t>(b)] =
            static_cast<unsigned char>(static_cast<std::uint32_t>(ids[i]) >> (8 * b));
    digest.add(bytes.data(), bytes.size());
    H5Id mem(H5Screate_simple(1, &count, nullptr), "H5Screate_simple");
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &offset, nullptr, &count, nullptr);
    if (H5Dwrite(ds, type.h5, mem, space, H5P_DEFAULT, bytes.data()) < 0) throw std::runtime_error("cannot write " + name);
    at += count;
  }
}

// The first document that starts at or after token `at`: at itself when a document ends just
// before it, else the start of the next one (the end if none). Documents end at c.document_ends,
// or where none are given after each c.newline token.
std::uint64_t document_start(const Corpus& c, std::uint64_t at) {
  const std::uint64_t n = c.tokens.size();
  if (at == 0 || at >= n) return std::min(at, n);
  if (!c.document_ends.empty()) return *std::lower_bound(c.document_ends.begin(), c.document_ends.end(), at);
  std::vector<std::int32_t> ids;
  for (std::uint64_t from = at - 1; from < n; from += ids.size()) {
    ids.resize(std::min(kBuffer, n - from));
    c.tokens.read(from, ids.size(), ids.data());
    if (const auto nl = std::find(ids.begin(), ids.end(), c.newline); nl != ids.end()) return from + (nl - ids.begin()) + 1;
  }
  return n;
}

// The SHA-256 of a file's bytes.
std::string file_digest(const std::string& path) {
  Sha256 digest;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    digest.add(buf.data(), static_cast<std::size_t>(in.gcount()));
  return digest.hex_digest();
}

// Shard k of `shards` of c as a Megatron indexed dataset at prefix (via .tmp + rename): the
// documents that start in the shard's share of the tokens. Returns the digest of its .bin and
// adds its documents to `documents`; "" (and no files) when no document starts in the share.
std::string write_indexed_shard(const Corpus& c, const std::string& prefix, int k, int shards, std::uint64_t& documents) {
  const auto [lo, hi] = share(c.tokens.size(), k, shards);
  const std::uint64_t begin = document_start(c, lo), end = document_start(c, hi);
  if (begin == end) return "";  // no document starts in this share (a longer one spans it): no files
  try {
    IndexedWriter w(prefix, c.vocab);
    auto next_end = std::upper_bound(c.document_ends.begin(), c.document_ends.end(), begin);  // given ends
    std::vector<std::int32_t> ids, document;
    for (std::uint64_t at = begin; at < end; at += ids.size()) {
      ids.resize(std::min(kBuffer, end - at));
      c.tokens.read(at, ids.size(), ids.data());
      for (std::size_t i = 0; i < ids.size(); ++i) {
        document.push_back(ids[i]);
        const bool ends = c.document_ends.empty() ? ids[i] == c.newline
                                                  : next_end != c.document_ends.end() && *next_end == at + i + 1;
        if (!ends) continue;
        w.add_document(document);
        document.clear();
        ++documents;
        if (!c.document_ends.empty()) ++next_end;
      }
    }
    if (!document.empty()) w.add_document(document), ++documents;  // the input's last line, without a newline
    w.finish();
    return file_digest(prefix + ".bin");
  } catch (const std::runtime_error& e) {
    throw Error("prepare: writing '" + prefix + ".bin/.idx' failed: " + e.what());
  }
}

// Shard k of `shards` of c as an HDF5 file at path (via .tmp + rename); returns the digest of
// its tokens as stored.
std::string write_h5_shard(const Corpus& c, const std::string& path, int k, int shards) {
  const std::string tmp = path + ".tmp";
  const auto [t0, t1] = share(c.train, k, shards);
  const auto [v0, v1] = share(c.val, k, shards);
  const StoredType type = stored_type(c.vocab);
  Sha256 digest;
  try {
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "cannot create '" + tmp + "'");
    write_tokens(file, "/train/tokens", c.tokens, t0, t1 - t0, type, digest);
    write_tokens(file, "/val/tokens", c.tokens, c.train + v0, v1 - v0, type, digest);
    if (!c.model.empty()) h5_write_bytes(file, "/tokenizer/model", c.model);
    const std::string sha = digest.hex_digest();
    h5_write_attr(file, "format", std::string("gridtrain-tokens"));
    h5_write_attr(file, "tokenizer", c.tokenizer);
    h5_write_attr(file, "vocab_size", static_cast<long long>(c.vocab));
    if (c.eod >= 0) h5_write_attr(file, "eod_id", static_cast<long long>(c.eod));
    h5_write_attr(file, "source", std::filesystem::path(c.source).filename().string());
    h5_write_attr(file, "source_bytes", static_cast<long long>(c.source_bytes));
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

std::uint64_t check_prepare_options(const PrepareOptions& o) {
  if (o.format != "hdf5" && o.format != "megatron")
    throw Error("prepare: --format " + o.format + " is unknown; valid: hdf5, megatron");
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0))
    throw Error("prepare: --val-fraction " + std::to_string(o.val_fraction) + " is invalid; valid: 0 < F < 1");
  if (o.tokenizer != "bytes" && o.tokenizer != "sentencepiece" && o.tokenizer != "hf")
    throw Error("prepare: --tokenizer " + o.tokenizer + " is unknown; valid: bytes, sentencepiece, hf");
  std::error_code ec;
  const std::uint64_t bytes = std::filesystem::file_size(o.input, ec);
  if (ec) throw Error("prepare: cannot read input file '" + o.input + "': " + ec.message());
  if (o.tokenizer != "bytes" && !(o.character_coverage > 0.0 && o.character_coverage <= 1.0))
    throw Error("prepare: --character-coverage " + std::to_string(o.character_coverage) + " is invalid; valid: 0 < F <= 1");
  if (o.shard_size == 0 && std::filesystem::is_directory(o.output))
    throw Error("prepare: --output " + o.output + " is a directory; give a file name (megatron: a prefix P for P.bin "
                "and P.idx), or --shard-size to write shards into it");
  if (o.format == "megatron")
    for (const char* ext : {".bin", ".idx", ".h5"})
      if (o.output.ends_with(ext))
        throw Error("prepare: --output " + o.output + ": give the prefix P of a Megatron dataset (it writes P.bin and "
                    "P.idx), without " + ext);
  if (o.json_key.empty()) throw Error("prepare: --json-key is empty; give the key of each line's text (e.g. text)");
  if (o.shard_size > 0) std::filesystem::create_directories(o.output);
  else if (const auto parent = std::filesystem::path(o.output).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent);
  return bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("prepare: cannot read '" + path + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

EncodedShare::EncodedShare(const PrepareOptions& o, MPI_Comm comm) : comm_(comm) {
  int ranks = 1;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &ranks);
  for (int r = 0; r < ranks; ++r) files_.push_back(o.output + ".tokens." + std::to_string(r));
}

EncodedShare::~EncodedShare() {
  std::error_code ignored;
  std::filesystem::remove(file(), ignored);
}

StoredIntegers EncodedShare::stream(std::uint64_t ids) const {
  std::vector<unsigned long long> counts(files_.size());
  unsigned long long mine = ids;
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, counts.data(), 1, MPI_UNSIGNED_LONG_LONG, comm_);
  std::vector<StoredIntegers::Part> parts;
  for (std::size_t r = 0; r < files_.size(); ++r) parts.push_back({files_[r], 0, counts[r], 4, true});
  StoredIntegers out;
  agree(comm_, [&] { out = StoredIntegers(parts); });
  return out;
}

std::unique_ptr<Tokenizer> tokenizer_for(const PrepareOptions& o, const std::string& model) {
  try {
    return make_tokenizer(o.tokenizer, model);
  } catch (const Error& e) {
    if (o.tokenizer == "hf") throw Error("prepare: --tokenizer-json " + o.hf_tokenizer + ": " + e.what());
    if (o.sp_model.empty()) throw;
    throw Error("prepare: --sp-model " + o.sp_model + ": " + e.what());
  }
}

std::string read_tokenizer_model(const PrepareOptions& o) {
  if (o.tokenizer == "hf") return read_hf_tokenizer(o.hf_tokenizer);
  return o.tokenizer == "sentencepiece" ? read_file(o.sp_model) : "";
}

void write_corpus(const PrepareOptions& o, Corpus& c, PrepareReport& r, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const std::uint64_t n = c.tokens.size();
  r.tokenizer = c.tokenizer;
  r.vocab_size = c.vocab;
  r.source_bytes = c.source_bytes;
  r.val_tokens = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.val_fraction * static_cast<double>(n)));
  r.train_tokens = n - std::min(n, r.val_tokens);
  c.train = r.train_tokens;
  c.val = r.val_tokens;
  r.shards = o.shard_size == 0 ? 1 : static_cast<int>(std::max<std::uint64_t>(1, (n + o.shard_size - 1) / o.shard_size));
  std::vector<std::string> digests(static_cast<std::size_t>(r.shards));
  agree(comm, [&] {
    if (n < 2) throw Error("prepare: input file '" + o.input + "' has fewer than 2 tokens");
    for (int k = rank; k < r.shards; k += ranks) {
      std::filesystem::path path = o.shard_size > 0 ? std::filesystem::path(o.output) / shard_name(k) : std::filesystem::path(o.output);
      auto& digest = digests[static_cast<std::size_t>(k)];
      if (o.format == "megatron")
        digest = write_indexed_shard(c, o.shard_size > 0 ? path.replace_extension("").string() : o.output, k, r.shards,
                                     r.documents);
      else
        digest = write_h5_shard(c, path.string(), k, r.shards);
    }
  });
  if (o.format == "megatron") {  // the reader splits it: every token is counted as train here
    MPI_Allreduce(MPI_IN_PLACE, &r.documents, 1, MPI_UINT64_T, MPI_SUM, comm);
    r.train_tokens = n;
    r.val_tokens = 0;
  }
  MPI_Barrier(comm);  // every rank done reading the encoded shares before they are removed
  std::string joined;  // every written shard's digest, in order, on every rank
  int written = 0;
  for (int k = 0; k < r.shards; ++k)
    if (const auto digest = broadcast_text(digests[static_cast<std::size_t>(k)], comm, k % ranks); !digest.empty())
      joined += digest + "\n", ++written;
  r.shards = written;
  r.sha256 = r.shards == 1 ? joined.substr(0, joined.size() - 1) : sha256_hex(joined);
}

}  // namespace gridtrain
