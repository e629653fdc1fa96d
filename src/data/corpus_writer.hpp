// The files `gridtrain prepare` writes from a token stream on disk (data/prepare.hpp): HDF5
// shards with /train and /val, or Megatron indexed datasets of documents. Shared by the text and
// JSONL inputs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/stored_integers.hpp"
#include "gridtrain/data/tokenizer.hpp"

namespace gridtrain {

/// A token stream to write, and what every shard records of it.
struct Corpus {
  StoredIntegers tokens;  ///< the whole stream, train then val
  std::uint64_t train = 0, val = 0;
  std::uint64_t source_bytes = 0;
  std::string source;            ///< the input file (its name is the source attribute)
  std::string tokenizer, model;  ///< name, serialized model ("" for bytes)
  int vocab = 0;
  std::int32_t eod = -1;  ///< the end-of-document token appended to each document (--append-eod), or -1
  /// Megatron: where documents end (token indices, increasing); empty: after each `newline` token.
  std::vector<std::uint64_t> document_ends;
  std::int32_t newline = -1;
};

/// The options every input shares checked (format, tokenizer, val_fraction, character_coverage,
/// the input readable), the output's directory made; returns the input's size in bytes. Throws
/// gridtrain::Error naming the option and what is valid.
std::uint64_t check_prepare_options(const PrepareOptions& o);

/// This rank's encoded share of the input: int32 ids, raw, in the scratch file o.output.tokens.<rank>,
/// removed when the share goes out of scope (after write_corpus has read every share).
class EncodedShare {
 public:
  EncodedShare(const PrepareOptions& o, MPI_Comm comm);
  ~EncodedShare();
  EncodedShare(const EncodedShare&) = delete;
  EncodedShare& operator=(const EncodedShare&) = delete;

  const std::string& file() const { return files_[static_cast<std::size_t>(rank_)]; }
  /// Collective over comm: every rank's share (this one holds `ids` ids), in rank order, as one
  /// stream. Throws gridtrain::Error (the same on every rank) when a file cannot be opened.
  StoredIntegers stream(std::uint64_t ids) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  std::vector<std::string> files_;
};

/// The whole of a file (a tokenizer model). Throws gridtrain::Error "prepare: cannot read 'PATH'".
std::string read_file(const std::string& path);

/// The tokenizer o.tokenizer with serialized `model`. Throws gridtrain::Error naming o.sp_model's
/// file when SentencePiece cannot load it (a file that is not a model).
std::unique_ptr<Tokenizer> tokenizer_for(const PrepareOptions& o, const std::string& model);

/// The serialized model of o's tokenizer: the --sp-model file, the --tokenizer-json bundle
/// (hf_tokenizer.hpp), or "" for bytes. Throws gridtrain::Error naming a file it cannot read.
std::string read_tokenizer_model(const PrepareOptions& o);

/// Collective over comm: splits c into train and validation (hdf5: o.val_fraction of the tokens,
/// the tail) and shards (o.shard_size; megatron: a shard in which no document starts is not
/// written), writes them (rank r shards r, r + p, ...) in o.format,
/// each via .tmp + rename, and fills r's token, shard, document and sha256 fields. Throws
/// gridtrain::Error (the same on every rank) for fewer than 2 tokens or a failed write.
void write_corpus(const PrepareOptions& o, Corpus& c, PrepareReport& r, MPI_Comm comm);

}  // namespace gridtrain
