// Test corpora: deterministic synthetic text prepared into a gridtrain token file.
#pragma once
#include <string>

namespace gridtrain::test {

/// A fresh directory under the system temp dir, unique per process and name.
std::string temp_dir(const std::string& name);

/// Writes `bytes` bytes of pseudo-English (fixed seed) to dir/corpus.txt, prepares it into
/// dir/corpus.h5 (val fraction 0.1) and returns the .h5 path. Only call on one rank at a time
/// per dir.
std::string make_corpus(const std::string& dir, std::size_t bytes);

}  // namespace gridtrain::test
