// Token datasets written by `gridtrain prepare`: loads /train/tokens and /val/tokens from HDF5
// into memory on every rank (a parallel, collective MPI-IO read) and checks the schema.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace gridtrain {

struct TokenData {
  std::vector<std::int32_t> train;  ///< (N_train,) token ids in [0, vocab_size)
  std::vector<std::int32_t> val;    ///< (N_val,)
  int vocab_size = 0;
  std::string tokenizer;
  std::string sha256;
};

/// Collective over comm. Throws gridtrain::Error (the same on every rank) naming the file and
/// what is wrong: missing, not HDF5, missing datasets/attributes, tokens >= vocab_size, or a
/// split shorter than min_tokens (one window of block_size + 1 tokens). prepare_hint is appended
/// to the error when the file does not exist.
TokenData load_tokens(const std::string& path, MPI_Comm comm, std::size_t min_tokens,
                      const std::string& prepare_hint);

}  // namespace gridtrain
