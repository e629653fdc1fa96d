#include "gridtrain/data/indexed_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gridtrain/config/data_split.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr std::size_t kChunk = 1 << 16;  // index entries per read in the streaming check

struct DType {
  int width;
  bool is_signed, integer;
  const char* name;
};

// Megatron's DType codes (indexed_dataset.py), 0 unused.
DType dtype_of(int code) {
  switch (code) {
    case 1: return {1, false, true, "uint8"};
    case 2: return {1, true, true, "int8"};
    case 3: return {2, true, true, "int16"};
    case 4: return {4, true, true, "int32"};
    case 5: return {8, true, true, "int64"};
    case 6: return {8, true, false, "float64"};
    case 7: return {4, true, false, "float32"};
    case 8: return {2, false, true, "uint16"};
    default: return {0, false, false, nullptr};
  }
}

template <class T>
T little_endian(const unsigned char* p) {  // x86-64 and every host we build for are little-endian
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads the index's arrays in chunks: n values of T from byte offset `at` of the open file.
class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) throw Error(file + ": cannot open: " + std::strerror(errno));
  }
  template <class T>
  std::vector<T> read(std::uint64_t at, std::size_t n) {
    std::vector<T> out(n);
    in_.seekg(static_cast<std::streamoff>(at));
    in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * sizeof(T)));
    if (!in_) throw Error(file_ + ": cannot read " + std::to_string(n * sizeof(T)) + " bytes at offset " + std::to_string(at));
    return out;
  }

 private:
  std::string file_;
  std::ifstream in_;
};

}  // namespace

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  namespace fs = std::filesystem;
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  for (const auto& f : {idx, bin})
    if (!fs::is_regular_file(f)) throw Error(f + ": not found (a Megatron indexed dataset is P.idx and P.bin)");
  const std::uint64_t size = fs::file_size(idx);
  if (size < kHeaderBytes)
    throw Error(idx + ": " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                "-byte header of a Megatron index");
  const auto head = Reader(idx).read<unsigned char>(0, kHeaderBytes);
  if (std::memcmp(head.data(), kMagic, sizeof kMagic) != 0)
    throw Error(idx + ": offset 0: not a Megatron index (the magic is not MMIDIDX\\0\\0)");
  if (const auto version = little_endian<std::uint64_t>(&head[9]); version != 1)
    throw Error(idx + ": offset 9: version " + std::to_string(version) + "; valid: 1");
  IndexedDataset d;
  d.prefix = prefix;
  d.dtype_code = head[17];
  const DType t = dtype_of(d.dtype_code);
  if (!t.integer)
    throw Error(idx + ": offset 17: dtype code " + std::to_string(d.dtype_code) +
                (t.name ? std::string(" (") + t.name + ") is not an integer type" : std::string(" is unknown")) +
                "; valid for tokens: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16");
  d.width = t.width;
  d.is_signed = t.is_signed;
  d.sequences = little_endian<std::uint64_t>(&head[18]);
  const auto document_indices = little_endian<std::uint64_t>(&head[26]);
  if (document_indices == 0) throw Error(idx + ": offset 26: 0 document indices; valid: D + 1 >= 1 (from 0 to S)");
  d.documents = document_indices - 1;
  const std::uint64_t expected = kHeaderBytes + 12 * d.sequences + 8 * document_indices;  // overflow: S, D < 2^59
  if (d.sequences >= (1ULL << 59) || document_indices >= (1ULL << 59) || size != expected)
    throw Error(idx + ": " + std::to_string(size) + " bytes, but S = " + std::to_string(d.sequences) + " sequences and " +
                std::to_string(document_indices) + " document indices need " + std::to_string(expected));
  return d;
}

std::vector<std::uint64_t> IndexedDataset::document_starts(const std::vector<std::uint64_t>& wanted) const {
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  Reader in(idx);
  const std::uint64_t lengths_at = kHeaderBytes, pointers_at = lengths_at + 4 * sequences,
                      documents_at = pointers_at + 8 * sequences;
  // Pass 1 over the sequences: lengths non-negative, pointers back to back; sequence_start[s]
  // (tokens before sequence s) is kept only where a wanted document begins, found in pass 2.
  // Both passes stream, so the two cursors below advance together in chunks.
  std::vector<std::uint64_t> out(wanted.size());
  std::uint64_t tokens = 0, s = 0, d = 0;
  std::size_t next = 0;  // the next wanted document
  std::vector<std::int64_t> doc_chunk;
  std::uint64_t doc_chunk_first = 0;
  auto document_index = [&](std::uint64_t i) {  // document index i, read in chunks
    if (doc_chunk.empty() || i < doc_chunk_first || i >= doc_chunk_first + doc_chunk.size()) {
      doc_chunk_first = i;
      doc_chunk = in.read<std::int64_t>(documents_at + 8 * i, std::min<std::uint64_t>(kChunk, documents + 1 - i));
    }
    return doc_chunk[i - doc_chunk_first];
  };
  auto check_document = [&](std::uint64_t i, std::int64_t value, std::int64_t previous) {
    const std::string at = idx + ": offset " + std::to_string(documents_at + 8 * i) + ": document index " + std::to_string(i) +
                           " = " + std::to_string(value);
    if (i == 0 && value != 0) throw Error(at + "; the first must be 0");
    if (value < previous) throw Error(at + " is below the previous one (" + std::to_string(previous) + "); they must not decrease");
    if (i == documents && static_cast<std::uint64_t>(value) != sequences)
      throw Error(at + "; the last must be the sequence count S = " + std::to_string(sequences));
    if (static_cast<std::uint64_t>(value) > sequences)
      throw Error(at + " is past the sequence count S = " + std::to_string(sequences));
  };
  std::int64_t previous = 0;
  // Emits the wanted documents that start at sequence s, given tokens before s.
  auto emit = [&] {
    while (d <= documents) {
      const std::int64_t first = document_index(d);
      check_document(d, first, previous);
      if (static_cast<std::uint64_t>(first) != s) break;
      previous = first;
      while (next < wanted.size() && wanted[next] == d) out[next++] = tokens;
      ++d;
    }
  };
  for (std::uint64_t begin = 0; begin < sequences; begin += kChunk) {
    const std::size_t n = std::min<std::uint64_t>(kChunk, sequences - begin);
    const auto lengths = in.read<std::int32_t>(lengths_at + 4 * begin, n);
    const auto pointers = in.read<std::int64_t>(pointers_at + 8 * begin, n);
    for (std::size_t i = 0; i < n; ++i, ++s) {
      emit();
      if (lengths[i] < 0)
        throw Error(idx + ": offset " + std::to_string(lengths_at + 4 * s) + ": sequence " + std::to_string(s) +
                    " has length " + std::to_string(lengths[i]));
      const std::uint64_t expected = tokens * static_cast<std::uint64_t>(width);
      if (pointers[i] < 0 || static_cast<std::uint64_t>(pointers[i]) != expected)
        throw Error(idx + ": offset " + std::to_string(pointers_at + 8 * s) + ": sequence " + std::to_string(s) +
                    "'s pointer is " + std::to_string(pointers[i]) + ", not " + std::to_string(expected) +
                    " where the previous sequence ends; pointers must increase back to back from 0, as Megatron's "
                    "IndexedDatasetBuilder writes them");
      tokens += static_cast<std::uint64_t>(lengths[i]);
    }
  }
  emit();  // the documents that start at S: the last index, and empty trailing documents
  const std::uint64_t bin_bytes = std::filesystem::file_size(bin), need = tokens * static_cast<std::uint64_t>(width);
  if (bin_bytes != need)
    throw Error(bin + ": " + std::to_string(bin_bytes) + " bytes, but the index's " + std::to_string(sequences) +
                " sequences hold " + std::to_string(tokens) + " tokens of " + std::to_string(width) + " bytes = " +
                std::to_string(need) + (bin_bytes < need ? " (the file is truncated)" : ""));
  if (next != wanted.size())
    throw std::logic_error("document_starts: document " + std::to_string(wanted[next]) + " not in 0 .. " +
                           std::to_string(documents) + " or not ascending");
  return out;
}

StoredIntegers::Part IndexedDataset::tokens(std::uint64_t begin, std::uint64_t end) const {
  return {prefix + ".bin", begin * static_cast<std::uint64_t>(width), end - begin, width, is_signed};
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> split_ranges(const std::string& split, std::uint64_t documents) {
  const auto w = split_weights(split);
  const double sum = w[0] + w[1] + w[2];
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  double c = 0;  // running sum of normalized weights, in Megatron's order of operations
  for (double x : w) {
    const double next = c + x / sum;
    // std::nearbyint in the default rounding mode rounds half to even, as Python's round().
    out.emplace_back(static_cast<std::uint64_t>(std::nearbyint(c * static_cast<double>(documents))),
                     static_cast<std::uint64_t>(std::nearbyint(next * static_cast<double>(documents))));
    c = next;
  }
  return out;
}

IndexedWriter::IndexedWriter(std::string prefix, long long vocab_size)
    : prefix_(std::move(prefix)), dtype_code_(vocab_size < 65500 ? 8 : 4), width_(vocab_size < 65500 ? 2 : 4),
      bin_(prefix_ + ".bin.tmp", std::ios::binary | std::ios::trunc) {
  if (!bin_) throw io_error("cannot create " + prefix_ + ".bin.tmp");
}

IndexedWriter::~IndexedWriter() {
  if (finished_) return;
  std::error_code ignored;
  bin_.close();
  std::filesystem::remove(prefix_ + ".bin.tmp", ignored);
  std::filesystem::remove(prefix_ + ".idx.tmp", ignored);
}

void IndexedWriter::add_document(std::span<const std::int32_t> tokens) {
  std::vector<unsigned char> raw(tokens.size() * static_cast<std::size_t>(width_));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(tokens[i]);  // in range: the tokenizer's vocabulary
    std::memcpy(&raw[i * static_cast<std::size_t>(width_)], &v, static_cast<std::size_t>(width_));
  }
  bin_.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  if (!bin_) throw io_error("writing " + prefix_ + ".bin.tmp failed");
  lengths_.push_back(static_cast<std::int32_t>(tokens.size()));
}

void IndexedWriter::finish() {
  bin_.close();
  if (!bin_) throw io_error("writing " + prefix_ + ".bin.tmp failed");
  const std::string tmp = prefix_ + ".idx.tmp";
  std::ofstream idx(tmp, std::ios::binary | std::ios::trunc);
  auto put = [&](const auto& v) { idx.write(reinterpret_cast<const char*>(&v), sizeof v); };
  idx.write(kMagic, sizeof kMagic);
  put(std::uint64_t{1});
  put(static_cast<std::uint8_t>(dtype_code_));
  const std::uint64_t S = lengths_.size();
  put(S);
  put(S + 1);  // one sequence per document: D = S
  idx.write(reinterpret_cast<const char*>(lengths_.data()), static_cast<std::streamsize>(4 * S));
  std::int64_t pointer = 0;
  for (const auto length : lengths_) put(pointer), pointer += static_cast<std::int64_t>(length) * width_;
  for (std::uint64_t d = 0; d <= S; ++d) put(static_cast<std::int64_t>(d));
  idx.close();
  if (!idx) throw io_error("writing " + tmp + " failed");
  std::filesystem::rename(prefix_ + ".bin.tmp", prefix_ + ".bin");
  std::filesystem::rename(tmp, prefix_ + ".idx");  // last: the index makes the dataset readable
  finished_ = true;
}

}  // namespace gridtrain
