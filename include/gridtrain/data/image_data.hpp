// Image sets written by `gridtrain prepare idx` (data/prepare_idx.hpp), left on disk and read
// image by image with pread, as token corpora are (data/token_data.hpp).
//
// File layout: /train/images (N, C, H, W) uint8, /train/labels (N,) uint8, /test/images
// (M, C, H, W), /test/labels (M,); contiguous storage; attributes format = "gridtrain-images",
// classes, sha256 (of the stored images and labels), source.
#pragma once
#include <cstdint>
#include <string>

#include <mpi.h>

#include "gridtrain/data/token_data.hpp"

namespace gridtrain {

struct ImageSplit {
  StoredIntegers pixels;  ///< N·C·H·W values 0..255, image after image
  StoredIntegers labels;  ///< N class indices in [0, classes)
  std::uint64_t count = 0;  ///< N
};

struct ImageData {
  ImageSplit train, test;
  int channels = 0, height = 0, width = 0, classes = 0;
  std::string file, sha256;
  std::int64_t pixels() const { return static_cast<std::int64_t>(channels) * height * width; }
};

/// Collective over comm: rank 0 reads the metadata, every rank opens the file for pread. Throws
/// gridtrain::Error (the same on every rank) naming the file and what is wrong: no such file
/// (prepare_hint appended), not HDF5, a missing dataset or attribute, shapes that disagree,
/// pixels that are not 1-byte unsigned, chunked storage, fewer than 2 classes, an empty split,
/// or a label >= classes (each rank checks its share).
ImageData load_images(const std::string& path, MPI_Comm comm, const std::string& prepare_hint);

/// Writes image i of `split` as a sample row of d.pixels() + 1 values: its pixels shifted by
/// (dy, dx) — out[c][y][x] = image[c][y + dy][x + dx], 0 where that falls outside — then its
/// label. A shift in [−P, P]² is a random crop of the image zero-padded by P pixels.
void copy_image(const ImageData& d, const ImageSplit& split, std::uint64_t i, int dy, int dx, std::int64_t* out);

}  // namespace gridtrain
