// One checkpoint file in parallel HDF5, written and read collectively through MPI-IO.
//
// Every dataset has its *global* (unsharded) shape. Each rank passes the hyperslab it owns
// (offset, count) or Slab::none() — ranks owning nothing still take part in the collective call
// with an empty selection, so replicated tensors are written once (by their owner) and no rank
// hangs. Every dataset carries an attribute "xsum64": the sum over elements of a 32-bit hash of
// (value bits, global index) mod 2^64, which any sharding can compute piecewise and add up
// (sum-allreduce), and which load() verifies. Layout and formula: docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "gridtrain/util/h5.hpp"

namespace gridtrain {

/// Root attribute `format` of every checkpoint, and the format version written and read.
inline constexpr const char* kCheckpointFormat = "gridtrain-checkpoint";
inline constexpr int kCheckpointVersion = 1;

enum class DType { F32, U8 };

/// Element size of t, bytes.
std::size_t dtype_size(DType t);

/// "(256, 16)", "(16,)": a shape as Python prints it.
std::string shape_text(const std::vector<hsize_t>& shape);

/// A hyperslab of a dataset: offset and count per dimension, optionally repeated `blocks` times
/// along dimension 0 every `stride` rows (a tensor-parallel shard of fused q, k, v rows: one
/// block per part). The blocks lie one after another in memory. none() selects nothing.
struct Slab {
  std::vector<hsize_t> offset, count;
  bool empty = false;
  hsize_t blocks = 1, stride = 0;
  static Slab none() { return {{}, {}, true}; }
  /// The whole of a dataset of shape `shape`.
  static Slab all(const std::vector<hsize_t>& shape) { return {std::vector<hsize_t>(shape.size(), 0), shape, false}; }
  std::size_t elements() const;
  /// Block b as a slab of its own.
  Slab block(hsize_t b) const;
};

/// Disjoint rectangles of a dataset (slabs of one block), ordered so that their elements in the
/// dataset's row-major order are the rectangles' one after another (as the pieces of a flat
/// range are), and so lie in memory. Empty: nothing selected.
using Selection = std::vector<Slab>;

/// slab's blocks as rectangles (none: empty).
Selection rectangles(const Slab& slab);

/// Where elements [begin, begin + count) of a row-major local tensor of shape local_shape lie in
/// the dataset, when the local tensor is the slab `whole` of it (a tensor-parallel shard: its
/// blocks one after another, then padding rows, which are in no dataset): at most 2·rank − 1
/// rectangles per block it spans (for a matrix, a partial first row, whole rows, a partial last
/// row). A ZeRO piece of a parameter or its optimizer state (parallel/bucket_layout.hpp). The
/// selected elements are the first ones of the range (padding comes last).
Selection piece_selection(const Slab& whole, const std::vector<hsize_t>& local_shape, hsize_t begin, hsize_t count);

/// Elements selected.
std::size_t elements(const Selection& s);

/// Order-independent checksum of the elements of slab (row-major, contiguous in data) of a
/// dataset of shape `shape`; sums of disjoint slabs add up to the whole dataset's checksum.
std::uint64_t xsum64(const void* data, DType t, const std::vector<hsize_t>& shape, const Slab& slab);
/// The same over a selection's rectangles, one after another in data.
std::uint64_t xsum64(const void* data, DType t, const std::vector<hsize_t>& shape, const Selection& selection);

class CheckpointFile {
 public:
  /// Creates (truncates) path for writing, collectively over comm. Throws std::runtime_error.
  static CheckpointFile create(const std::string& path, MPI_Comm comm);
  /// Opens path read-only, collectively over comm. Throws std::runtime_error.
  static CheckpointFile open(const std::string& path, MPI_Comm comm);

  /// Collective: creates dataset `name` (intermediate groups included) of global `shape` and
  /// writes this rank's slab from data (contiguous, row-major). Makes no other collective call:
  /// its checksum is stored by seal(). Throws std::runtime_error (std::system_error with the OS
  /// error where one is known) when the write fails on this rank.
  void write(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Slab& slab,
             const void* data) {
    write(name, t, shape, rectangles(slab), data);
  }
  /// The same for a selection of rectangles (each rank writing its ZeRO pieces).
  void write(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Selection& selection,
             const void* data);
  /// Collective: stores the checksums of the datasets written since the last seal() (one
  /// allreduce for all of them). flush() and close() seal first.
  void seal();
  /// Collective: reads this rank's slab of `name` into out (row-major). The checksum is verified
  /// over the slabs of the `primary` ranks, which must partition the dataset (replicas read the
  /// same data as non-primary), or by every rank alone when every rank reads the whole dataset.
  /// Throws std::runtime_error naming the dataset when it is missing, its shape differs from
  /// `shape`, its type differs, or its checksum does not match.
  void read(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Slab& slab, void* out,
            bool primary = true) {
    read(name, t, shape, rectangles(slab), out, primary);
  }
  /// The same for a selection of rectangles (each rank reading its ZeRO pieces).
  void read(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Selection& selection,
            void* out, bool primary = true);
  /// Global shape of dataset name, or throws std::runtime_error if it does not exist.
  std::vector<hsize_t> shape_of(const std::string& name) const;
  bool exists(const std::string& name) const;
  /// Every dataset in the file by its absolute name ("/model/wte.weight"), in HDF5's order.
  std::vector<std::string> datasets() const;
  /// Element type of dataset name as stored (float → F32, anything else → U8).
  DType dtype_of(const std::string& name) const;
  /// Reads all of dataset name and verifies its checksum; throws std::runtime_error as read() does.
  void verify(const std::string& name);

  /// Throws std::runtime_error unless the root says format = kCheckpointFormat and version =
  /// kCheckpointVersion (naming what it says instead).
  void check_header() const;

  hid_t root() const { return file_; }
  /// Seals, then flushes to stable storage (collective).
  void flush();
  /// Seals, then closes the file (collective); further use is an error.
  void close();

 private:
  CheckpointFile(H5Id file, MPI_Comm comm, std::string path)
      : file_(std::move(file)), comm_(comm), path_(std::move(path)) {}
  H5Id file_;
  MPI_Comm comm_;
  std::string path_;
  std::vector<std::pair<std::string, std::uint64_t>> unsealed_;  // dataset, this rank's checksum share
};

}  // namespace gridtrain
