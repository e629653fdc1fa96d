// `gridtrain prepare text`: turns a text file into byte-level tokens (vocab 256) in HDF5,
// streaming it (a bounded buffer, never the whole file), into one file or into shards.
//
// File layout (read back by data/token_data.hpp):
//   /train/tokens   uint8 (N_train,)  contiguous
//   /val/tokens     uint8 (N_val,)    contiguous
//   / attrs: format="gridtrain-tokens", tokenizer="bytes", vocab_size=256, source (file name),
//            source_bytes, sha256 (hex digest of this file's source bytes), shard, shards
// The input's first (1 − val_fraction) of the bytes are the training split, the rest the
// validation split (a contiguous tail, so no window straddles both). Shard k of K holds the
// k-th contiguous share of each split, so the shards concatenated are exactly the one-file
// corpus.
#pragma once
#include <cstdint>
#include <string>

#include <mpi.h>

namespace gridtrain {

struct PrepareOptions {
  std::string input, output;  ///< output: the .h5 file, or with shards the directory for them
  double val_fraction = 0.1;  ///< in (0, 1)
  std::uint64_t shard_size = 0;  ///< tokens per shard (at most); 0: one file
};

struct PrepareReport {
  std::uint64_t source_bytes = 0;
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  int shards = 1;
  std::string sha256;  ///< one file: the source's digest; shards: that of the shards' digests
};

/// Collective over comm: rank r writes shards r, r + p, ... (one file: rank 0), each via
/// <file>.tmp + rename, so a crash never leaves a half file. Throws gridtrain::Error (the same on
/// every rank) naming the file when input cannot be read or is shorter than 2 bytes, the options
/// are invalid, or an output cannot be written.
PrepareReport prepare_text(const PrepareOptions& o, MPI_Comm comm);

/// Hex SHA-256 of bytes (OpenSSL EVP).
std::string sha256_hex(const std::string& bytes);

/// Name of shard k in a shard directory: shard-<k, 6 digits>.h5.
std::string shard_name(int k);

}  // namespace gridtrain
