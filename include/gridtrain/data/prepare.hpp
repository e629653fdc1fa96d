// `gridtrain prepare text`: turns a text file into byte-level tokens (vocab 256) in HDF5.
//
// File layout (read back by TokenData):
//   /train/tokens   uint8 (N_train,)  the first (1 - val_fraction) of the bytes
//   /val/tokens     uint8 (N_val,)    the rest (a contiguous tail, so no window straddles both)
//   / attrs: format="gridtrain-tokens", tokenizer="bytes", vocab_size=256, source (file name),
//            source_bytes, sha256 (hex digest of the source bytes)
#pragma once
#include <cstdint>
#include <string>

namespace gridtrain {

struct PrepareReport {
  std::uint64_t source_bytes = 0;
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  std::string sha256;
};

/// Writes output (via output.tmp + rename, so a crash never leaves a half file). val_fraction
/// must be in (0, 1). Throws gridtrain::Error naming the file when input cannot be read, is
/// empty, or output cannot be written.
PrepareReport prepare_text(const std::string& input, const std::string& output, double val_fraction);

/// Hex SHA-256 of bytes (OpenSSL EVP).
std::string sha256_hex(const std::string& bytes);

}  // namespace gridtrain
