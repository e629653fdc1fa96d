// Test corpora: deterministic synthetic text prepared into a gridtrain token file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/token_data.hpp"

namespace gridtrain::test {

/// A fresh directory under the system temp dir, unique per process and name.
std::string temp_dir(const std::string& name);

/// Writes `bytes` bytes of pseudo-English (fixed seed) to dir/corpus.txt, prepares it into
/// dir/corpus.h5 (val fraction 0.1) and returns the .h5 path. Only call on one rank at a time
/// per dir.
std::string make_corpus(const std::string& dir, std::size_t bytes);

/// Writes a learnable synthetic image set as IDX files in dir — class k (of 4) is a bright 3×3
/// block in quadrant k of a 12×12 image, plus noise; the training images gzipped, the rest plain —
/// converts them with prepare_idx into dir/images.h5 and returns its path. One rank at a time per dir.
std::string make_images(const std::string& dir, int train, int test);
/// Writes an IDX file of unsigned bytes: dims, then data (gzipped when gz).
void write_idx(const std::string& path, const std::vector<std::uint32_t>& dims, const std::string& data, bool gz);

/// o with shard_size / val_fraction set.
PrepareOptions sharded(PrepareOptions o, std::uint64_t shard_size);
PrepareOptions with_val_fraction(PrepareOptions o, double val_fraction);

/// All tokens of a split, in order.
std::vector<std::int32_t> read_all(const StoredIntegers& split);

/// Cuts the corpus file `path` into `shards` files dir/shard-<i>.h5, each a contiguous slice of
/// both splits (uint8 tokens, the same vocab_size and tokenizer), and returns dir.
std::string shard_corpus(const std::string& path, const std::string& dir, int shards);

}  // namespace gridtrain::test
