// Where an HDF5 dataset's elements lie in its file, so that StoredIntegers (data/token_data.hpp) can
// pread them: token splits and the image sets' pixels and labels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gridtrain/data/token_data.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {

/// Dataset `name` of the open HDF5 file `file` (named path in the Part and in errors) as one
/// StoredIntegers part of all its elements in row-major order; dims receives its shape. Throws
/// std::runtime_error when the dataset is missing or not integer, gridtrain::Error when it is
/// chunked, compressed or big-endian (pread needs contiguous little-endian storage).
StoredIntegers::Part dataset_part(hid_t file, const std::string& path, const std::string& name,
                              std::vector<std::uint64_t>& dims);

}  // namespace gridtrain
