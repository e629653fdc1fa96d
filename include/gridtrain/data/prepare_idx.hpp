// `gridtrain prepare idx`: converts an image set in IDX files (LeCun et al.'s MNIST format, as
// Fashion-MNIST ships it; gzipped or not) into the HDF5 layout data/image_data.hpp reads:
// /train/images (N, C, H, W) uint8, /train/labels (N,) uint8, /test/images, /test/labels, and
// the attributes format, classes, sha256 and source.
//
// IDX (http://yann.lecun.com/exdb/mnist/): a 4-byte magic 0, 0, type (0x08 = unsigned byte),
// rank; then rank big-endian uint32 dimensions; then the data, row-major. Images are rank 3
// (N, H, W: C = 1) or rank 4 (N, C, H, W); labels rank 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace gridtrain {

struct IdxOptions {
  std::string images, labels;            ///< the training set's IDX files
  std::string test_images, test_labels;  ///< the test set's
  std::string output;                    ///< the .h5 file
  int classes = 0;  ///< 0: the largest label + 1; else labels must lie in [0, classes) (--classes)
};

struct IdxReport {
  std::uint64_t train = 0, test = 0;  ///< images
  int channels = 0, height = 0, width = 0, classes = 0;
  std::string sha256;  ///< of the stored images and labels, train then test
  std::vector<int> unused;  ///< labels in [0, classes) that no image has (a stray label widens the head)
};

/// Collective over comm (rank 0 converts; the file is small enough to hold): writes
/// output.tmp and renames it. classes = o.classes, or the largest label + 1. Throws
/// gridtrain::Error (the same on every rank) naming the file: unreadable, not IDX of unsigned
/// bytes, images whose count disagrees with their labels, train and test image shapes that
/// differ, an empty set, one class only, a label outside [0, o.classes) (naming it and its index).
IdxReport prepare_idx(const IdxOptions& o, MPI_Comm comm);

}  // namespace gridtrain
