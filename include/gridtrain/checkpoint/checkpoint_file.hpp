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

enum class DType { F32, U8 };

/// Element size of t, bytes.
std::size_t dtype_size(DType t);

/// "(256, 16)", "(16,)": a shape as Python prints it.
std::string shape_text(const std::vector<hsize_t>& shape);

/// A hyperslab of a dataset: offset and count per dimension. none() selects nothing.
struct Slab {
  std::vector<hsize_t> offset, count;
  bool empty = false;
  static Slab none() { return {{}, {}, true}; }
  /// The whole of a dataset of shape `shape`.
  static Slab all(const std::vector<hsize_t>& shape) { return {std::vector<hsize_t>(shape.size(), 0), shape, false}; }
  std::size_t elements() const;
};

/// Order-independent checksum of the elements of slab (row-major, contiguous in data) of a
/// dataset of shape `shape`; sums of disjoint slabs add up to the whole dataset's checksum.
std::uint64_t xsum64(const void* data, DType t, const std::vector<hsize_t>& shape, const Slab& slab);

class CheckpointFile {
 public:
  /// Creates (truncates) path for writing, collectively over comm. Throws std::runtime_error.
  static CheckpointFile create(const std::string& path, MPI_Comm comm);
  /// Opens path read-only, collectively over comm. Throws std::runtime_error.
  static CheckpointFile open(const std::string& path, MPI_Comm comm);

  /// Collective: creates dataset `name` (intermediate groups included) of global `shape`, writes
  /// this rank's slab from data (contiguous, row-major) and stores the checksum.
  void write(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Slab& slab,
             const void* data);
  /// Collective: reads this rank's slab of `name` into out (row-major). The slabs must either all
  /// be the whole dataset or partition it (that is how the checksum is verified). Throws std::runtime_error
  /// naming the dataset when it is missing, its shape differs from `shape`, its type differs, or
  /// its checksum does not match.
  void read(const std::string& name, DType t, const std::vector<hsize_t>& shape, const Slab& slab, void* out);
  /// Global shape of dataset name, or throws std::runtime_error if it does not exist.
  std::vector<hsize_t> shape_of(const std::string& name) const;
  bool exists(const std::string& name) const;

  hid_t root() const { return file_; }
  /// Flushes to stable storage (collective).
  void flush();
  /// Closes the file (collective); further use is an error.
  void close();

 private:
  CheckpointFile(H5Id file, MPI_Comm comm) : file_(std::move(file)), comm_(comm) {}
  H5Id file_;
  MPI_Comm comm_;
};

}  // namespace gridtrain
