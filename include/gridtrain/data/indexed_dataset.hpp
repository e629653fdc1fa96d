// Megatron-LM's indexed dataset ("MMIDIDX", megatron/core/datasets/indexed_dataset.py), read in
// place and written by `gridtrain prepare --format megatron`: the tokens of every sequence back
// to back in P.bin, and their index in P.idx, all little-endian:
//   magic "MMIDIDX\0\0" (9 bytes), version u64 = 1, dtype code u8 (1 uint8, 2 int8, 3 int16,
//   4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), sequence count S u64, document count
//   D + 1 u64, sequence lengths int32 × S, byte pointers into P.bin int64 × S, document indices
//   int64 × (D + 1) (the first sequence of each document, from 0 to S).
// A document is one or more sequences; gridtrain reads a dataset as one token stream, documents
// in order, as Megatron's GPTDataset does, and splits it into train / validation / test by
// documents with Megatron's rule (split_ranges). The index is checked in one streaming pass, so
// memory does not grow with the corpus.
#pragma once
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "gridtrain/data/stored_integers.hpp"

namespace gridtrain {

/// The header of P.idx, and where its tokens lie in P.bin.
struct IndexedDataset {
  std::string prefix;          ///< P: the files are P.idx and P.bin
  int dtype_code = 0;          ///< Megatron's DType code (integer ones only: 1–5, 8)
  int width = 0;               ///< bytes per token
  bool is_signed = false;
  std::uint64_t sequences = 0;  ///< S
  std::uint64_t documents = 0;  ///< D (the index stores D + 1 document indices)

  /// Reads and checks P.idx's header. Throws gridtrain::Error naming the file and the byte offset:
  /// not found, wrong magic or version, a dtype code that is unknown or not an integer, or a file
  /// whose size disagrees with S and D.
  static IndexedDataset open(const std::string& prefix);

  /// The token index (0 .. the dataset's tokens) at which each of `documents` starts (each in
  /// 0 .. D, ascending; D gives the total token count), found while checking the whole index in
  /// one pass. Throws gridtrain::Error naming the file and offset: a negative length, a pointer
  /// that is not where the previous sequence ends (pointers must increase, back to back, from 0),
  /// P.bin shorter or longer than the pointers say, document indices that do not start at 0,
  /// decrease, or do not end at S.
  std::vector<std::uint64_t> document_starts(const std::vector<std::uint64_t>& documents) const;

  /// Tokens [begin, end) of the stream as a StoredIntegers part of P.bin.
  StoredIntegers::Part tokens(std::uint64_t begin, std::uint64_t end) const;
};

/// Document ranges [begin, end) of Megatron's train, validation and test splits of D documents,
/// from weights such as "969,30,1" (data.split; missing trailing weights are 0): normalized, the
/// bookends are the running sums, and split i is [round(c_i·D), round(c_{i+1}·D)), rounding half
/// to even as Python's round() (megatron/core/datasets: parse_and_normalize_split,
/// convert_split_vector_to_split_matrix, BlendedMegatronDatasetBuilder). Throws gridtrain::Error
/// as split_weights (config/data_split.hpp) for weights that are not valid.
std::vector<std::pair<std::uint64_t, std::uint64_t>> split_ranges(const std::string& split, std::uint64_t documents);

/// Writes an indexed dataset as Megatron's IndexedDatasetBuilder does, one document at a time
/// (each one sequence): P.bin.tmp and P.idx.tmp, renamed to P.bin and P.idx by finish(), so a
/// crash never leaves a dataset that reads. dtype: uint16 for a vocabulary below 65,500, else
/// int32 (Megatron's DType.optimal_dtype). Throws std::system_error naming the file when a
/// write fails; the .tmp files are then removed.
class IndexedWriter {
 public:
  IndexedWriter(std::string prefix, long long vocab_size);
  ~IndexedWriter();  ///< without finish(): removes the .tmp files
  IndexedWriter(const IndexedWriter&) = delete;
  IndexedWriter& operator=(const IndexedWriter&) = delete;

  void add_document(std::span<const std::int32_t> tokens);
  /// Writes the index and renames both files into place.
  void finish();

 private:
  std::string prefix_;
  int dtype_code_, width_;
  std::vector<std::int32_t> lengths_;
  std::ofstream bin_;
  bool finished_ = false;
};

}  // namespace gridtrain
