// Integers left on disk in contiguous HDF5 datasets and read with pread(2) at the datasets' file
// offsets (H5Dget_offset, data/dataset_part.hpp): no HDF5 call, so any thread may read, and memory
// does not grow with the data. Token corpora (data/token_data.hpp) and image sets
// (data/image_data.hpp) are read through it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gridtrain {

/// Integers in contiguous HDF5 datasets of one or more files (a token split over its shards, an
/// image set's pixels or labels), read as one sequence with pread(2). Copies share the open files.
class StoredIntegers {
 public:
  /// Where one file's part of the sequence lies in it.
  struct Part {
    std::string file;
    std::uint64_t offset = 0;  ///< bytes from the start of the file to the first value
    std::uint64_t count = 0;   ///< values
    int width = 1;             ///< bytes per stored value: 1, 2, 4 or 8, little-endian
    bool is_signed = false;
  };
  StoredIntegers() = default;
  /// Opens every part's file. Throws gridtrain::Error naming a file that cannot be opened.
  explicit StoredIntegers(std::vector<Part> parts);

  std::uint64_t size() const { return size_; }
  /// Values [start, start + n) (within size()) into out, narrowed to int32 (the loaders checked
  /// every value against its range). Thread-safe. Throws gridtrain::Error naming the file
  /// on a failed or short read.
  void read(std::uint64_t start, std::size_t n, std::int32_t* out) const;
  /// The first value in [begin, end) outside [0, vocab), as stored (e.g. "4294967303"), or ""
  /// when all are inside. Reads in chunks of at most 8 MiB.
  std::string first_outside(std::uint64_t begin, std::uint64_t end, long long vocab) const;

 private:
  struct Files;
  std::shared_ptr<const Files> files_;
  std::uint64_t size_ = 0;
};

}  // namespace gridtrain
