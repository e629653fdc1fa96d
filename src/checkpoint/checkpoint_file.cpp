#include "gridtrain/checkpoint/checkpoint_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/files.hpp"

namespace gridtrain {
namespace {

hid_t file_type(DType t) { return t == DType::F32 ? H5T_IEEE_F32LE : H5T_STD_U8LE; }
hid_t mem_type(DType t) { return t == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8; }

// Selects the rectangles in a copy of the dataset's file space; returns (file space, memory
// space). HDF5 transfers a union of hyperslabs in the file's row-major order: the rectangles'
// order (Selection).
std::pair<H5Id, H5Id> select(hid_t dataset, const Selection& selection) {
  H5Id file_space(H5Dget_space(dataset), "H5Dget_space");
  const hsize_t n = elements(selection);
  if (n == 0) {
    H5Sselect_none(file_space);
    H5Id mem(H5Scopy(file_space), "H5Scopy");  // same extent, nothing selected
    H5Sselect_none(mem);
    return {std::move(file_space), std::move(mem)};
  }
  if (selection.front().offset.empty()) return {std::move(file_space), H5Id(H5Screate(H5S_SCALAR), "H5Screate")};
  bool first = true;
  for (const Slab& r : selection) {
    if (r.elements() == 0) continue;
    H5Sselect_hyperslab(file_space, first ? H5S_SELECT_SET : H5S_SELECT_OR, r.offset.data(), nullptr, r.count.data(),
                        nullptr);
    first = false;
  }
  return {std::move(file_space), H5Id(H5Screate_simple(1, &n, nullptr), "H5Screate_simple")};
}

// A failed write, with the OS error. Through HDF5 and MPI-IO errno is unreliable on the rank
// that sees the failure (unset when the system call ran on an aggregator, or overwritten since),
// so a small probe write next to the file asks the OS what is wrong (a full disk, a read-only
// one); errno is the answer only when the probe succeeds.
std::runtime_error write_error(const std::string& what, const std::string& path) {
  const int code = errno;
  const int probed = probe_write(std::filesystem::path(path).parent_path());
  errno = probed != 0 ? probed : code;
  return io_error(what);
}

std::uint64_t allreduce_sum(std::uint64_t v, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UINT64_T, MPI_SUM, comm);
  return v;
}

}  // namespace

std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 1; }

std::string shape_text(const std::vector<hsize_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

std::size_t Slab::elements() const {
  if (empty) return 0;
  std::size_t n = blocks;
  for (auto c : count) n *= c;
  return n;
}

Slab Slab::block(hsize_t b) const {
  Slab one{offset, count, empty};
  if (!empty && !offset.empty()) one.offset[0] += b * stride;
  return one;
}

Selection rectangles(const Slab& slab) {
  Selection out;
  for (hsize_t b = 0; b < slab.blocks && slab.elements() > 0; ++b) out.push_back(slab.block(b));
  return out;
}

std::size_t elements(const Selection& s) {
  std::size_t n = 0;
  for (const auto& r : s) n += r.elements();
  return n;
}

namespace {

// The flat range [begin, end) of a row-major tensor of `shape` from dimension d on, at `at` in
// the dimensions before d, as rectangles appended to out in order (Slab offsets in local
// coordinates): a partial first index of d, the whole ones, a partial last one.
void flat_rectangles(const std::vector<hsize_t>& shape, std::size_t d, std::vector<hsize_t> at, hsize_t begin,
                     hsize_t end, Selection& out) {
  if (begin >= end) return;
  hsize_t inner = 1;  // elements per index of dimension d
  for (std::size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  auto rectangle = [&](hsize_t first, hsize_t last) {  // indices [first, last) of d, everything below
    Slab r{at, {}, false};
    r.offset.push_back(first);
    r.offset.resize(shape.size(), 0);
    r.count.assign(d, 1);
    r.count.push_back(last - first);
    r.count.insert(r.count.end(), shape.begin() + static_cast<std::ptrdiff_t>(d) + 1, shape.end());
    out.push_back(std::move(r));
  };
  const hsize_t lo = begin / inner, hi = end / inner;  // hi: the index where a partial last one starts
  auto deeper = [&](hsize_t index, hsize_t from, hsize_t to) {
    auto next = at;
    next.push_back(index);
    flat_rectangles(shape, d + 1, next, from - index * inner, to - index * inner, out);
  };
  if (lo == hi) return deeper(lo, begin, end);  // within one index of d
  hsize_t whole_from = lo;
  if (begin % inner != 0) deeper(lo, begin, (lo + 1) * inner), whole_from = lo + 1;
  if (hi > whole_from) rectangle(whole_from, hi);
  if (end % inner != 0) deeper(hi, hi * inner, end);
}

}  // namespace

Selection piece_selection(const Slab& whole, const std::vector<hsize_t>& local_shape, hsize_t begin, hsize_t count) {
  Selection local, out;
  if (whole.empty || count == 0) return out;
  flat_rectangles(local_shape, 0, {}, begin, begin + count, local);
  const hsize_t block_rows = local_shape[0] / whole.blocks, valid = whole.count[0];  // rows past valid: padding
  for (Slab r : local) {
    // Dimension 0 split at the blocks' boundaries, then each part moved to its block's place.
    for (hsize_t row = r.offset[0], end = r.offset[0] + r.count[0]; row < end;) {
      const hsize_t b = row / block_rows, in_block = row % block_rows;
      const hsize_t rows = std::min(end - row, block_rows - in_block);
      Slab g = r;
      g.offset[0] = in_block;
      g.count[0] = in_block < valid ? std::min(rows, valid - in_block) : 0;
      const Slab place = whole.block(b);
      for (std::size_t k = 0; k < g.offset.size(); ++k) g.offset[k] += place.offset[k];
      if (g.elements() > 0) out.push_back(std::move(g));
      row += rows;
    }
  }
  return out;
}

namespace {

// MurmurHash3's 32-bit finalizer of (element bits ^ index · golden ratio), summed in 64 bits.
// Cloned for AVX2 so that the loop runs 8 lanes wide where the CPU has it.
using u32_alias = std::uint32_t __attribute__((__may_alias__));
__attribute__((target_clones("avx2", "default"))) std::uint64_t xsum_words(const u32_alias* w, std::size_t n,
                                                                           std::uint32_t first) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t h = w[i] ^ ((first + static_cast<std::uint32_t>(i)) * 0x9E3779B1u);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    sum += h;
  }
  return sum;
}

// The same for a run of bytes, each widened to a word.
std::uint64_t xsum_bytes(const unsigned char* b, std::size_t n, std::uint32_t first) {
  std::vector<std::uint32_t> w(b, b + n);
  return xsum_words(w.data(), n, first);
}

}  // namespace

std::uint64_t xsum64(const void* data, DType t, const std::vector<hsize_t>& shape, const Selection& selection) {
  std::uint64_t sum = 0;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (const Slab& r : selection) {  // one after another in data
    sum += xsum64(bytes, t, shape, r);
    bytes += r.elements() * dtype_size(t);
  }
  return sum;
}

std::uint64_t xsum64(const void* data, DType t, const std::vector<hsize_t>& shape, const Slab& slab) {
  if (slab.blocks > 1) return xsum64(data, t, shape, rectangles(slab));
  const std::size_t n = slab.elements();
  if (n == 0) return 0;
  const std::size_t rank = shape.size();
  const auto* bytes = static_cast<const unsigned char*>(data);
  // Walk the slab row by row (last dimension contiguous), tracking the global linear index.
  const std::size_t row = rank ? slab.count[rank - 1] : 1;
  std::vector<hsize_t> pos(rank, 0);  // position within the slab, excluding the last dimension
  std::uint64_t sum = 0;
  for (std::size_t done = 0; done < n; done += row) {
    std::uint64_t base = 0;
    for (std::size_t d = 0; d < rank; ++d)
      base = base * shape[d] + slab.offset[d] + (d + 1 < rank ? pos[d] : 0);
    const auto first = static_cast<std::uint32_t>(base);  // index mod 2^32
    sum += t == DType::F32 ? xsum_words(reinterpret_cast<const u32_alias*>(bytes + done * 4), row, first)
                           : xsum_bytes(bytes + done, row, first);
    for (std::size_t d = rank >= 2 ? rank - 1 : 0; d-- > 0;) {  // odometer over leading dims
      if (++pos[d] < slab.count[d]) break;
      pos[d] = 0;
    }
  }
  return sum;
}

CheckpointFile CheckpointFile::create(const std::string& path, MPI_Comm comm) {
  h5_silence_errors();
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  errno = 0;
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (id < 0) throw write_error("cannot create checkpoint '" + path + "'", path);
  return CheckpointFile(H5Id(id, ""), comm, path);
}

CheckpointFile CheckpointFile::open(const std::string& path, MPI_Comm comm) {
  h5_silence_errors();
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl),
            "cannot open checkpoint '" + path + "' (missing, truncated or not HDF5)");
  return CheckpointFile(std::move(file), comm, path);
}

void CheckpointFile::write(const std::string& name, DType t, const std::vector<hsize_t>& shape,
                           const Selection& selection, const void* data) {
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id space(shape.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr),
             "H5Screate_simple");
  H5Id ds(H5Dcreate2(file_, name.c_str(), file_type(t), space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
          "cannot create dataset " + name);
  auto [file_space, mem_space] = select(ds, selection);
  H5Id xfer = h5_collective_xfer();
  errno = 0;
  if (H5Dwrite(ds, mem_type(t), mem_space, file_space, xfer, data) < 0)
    throw write_error("cannot write dataset " + name, path_);
  unsealed_.emplace_back(name, xsum64(data, t, shape, selection));
}

void CheckpointFile::seal() {
  std::vector<std::uint64_t> sums(unsealed_.size());
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = unsealed_[i].second;
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm_);
  for (std::size_t i = 0; i < sums.size(); ++i) {
    H5Id ds(H5Dopen2(file_, unsealed_[i].first.c_str(), H5P_DEFAULT), "cannot open dataset " + unsealed_[i].first);
    h5_write_attr(ds, "xsum64", static_cast<long long>(sums[i]));
  }
  unsealed_.clear();
}

bool CheckpointFile::exists(const std::string& name) const {
  // Check each link of the path: H5Lexists fails on a missing intermediate group.
  std::size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos)
    if (H5Lexists(file_, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
}

namespace {

#if H5_VERSION_GE(1, 12, 0)
using ObjectInfo = H5O_info2_t;
#else
using ObjectInfo = H5O_info_t;
#endif

herr_t collect_dataset(hid_t, const char* name, const ObjectInfo* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

}  // namespace

std::vector<std::string> CheckpointFile::datasets() const {
  std::vector<std::string> names;
#if H5_VERSION_GE(1, 12, 0)
  const herr_t rc = H5Ovisit3(file_, H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &names, H5O_INFO_BASIC);
#else
  const herr_t rc = H5Ovisit(file_, H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &names);
#endif
  if (rc < 0) throw std::runtime_error("cannot list the datasets (truncated or corrupt file?)");
  return names;
}

DType CheckpointFile::dtype_of(const std::string& name) const {
  H5Id ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open dataset " + name);
  H5Id type(H5Dget_type(ds), "H5Dget_type");
  return H5Tget_class(type) == H5T_FLOAT ? DType::F32 : DType::U8;
}

void CheckpointFile::verify(const std::string& name) {
  const auto shape = shape_of(name);
  const DType t = dtype_of(name);
  std::vector<unsigned char> buf(std::max<std::size_t>(1, Slab::all(shape).elements() * dtype_size(t)));
  read(name, t, shape, Slab::all(shape), buf.data());
}

std::vector<hsize_t> CheckpointFile::shape_of(const std::string& name) const {
  if (!exists(name)) throw std::runtime_error("dataset " + name + " is missing");
  H5Id ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open dataset " + name);
  H5Id space(H5Dget_space(ds), "H5Dget_space");
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space))));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

void CheckpointFile::read(const std::string& name, DType t, const std::vector<hsize_t>& shape,
                          const Selection& selection, void* out, bool primary) {
  const auto found = shape_of(name);
  if (found != shape)
    throw std::runtime_error("tensor " + name + " has shape " + shape_text(found) + " in the checkpoint but " +
                             shape_text(shape) + " in this run (the deck changes the model's shape)");
  H5Id ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open dataset " + name);
  H5Id type(H5Dget_type(ds), "H5Dget_type");
  if (H5Tequal(type, file_type(t)) <= 0) throw std::runtime_error("dataset " + name + " has an unexpected type");
  auto [file_space, mem_space] = select(ds, selection);
  H5Id xfer = h5_collective_xfer();
  errno = 0;
  if (H5Dread(ds, mem_type(t), mem_space, file_space, xfer, out) < 0)
    throw io_error("cannot read dataset " + name + " (truncated or corrupt file?)");
  if (!h5_has_attr(ds, "xsum64")) throw std::runtime_error("dataset " + name + " has no xsum64 checksum");
  const auto expected = static_cast<std::uint64_t>(h5_read_attr_int(ds, "xsum64"));
  // A rank holding the whole tensor verifies it alone; a partition is verified by adding up the
  // primary shards' sums.
  int everyone_whole = selection.size() == 1 && selection.front().count == shape ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &everyone_whole, 1, MPI_INT, MPI_MIN, comm_);
  const std::uint64_t local = xsum64(out, t, shape, selection);
  const bool ok = everyone_whole ? local == expected : allreduce_sum(primary ? local : 0, comm_) == expected;
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, comm_);
  if (!all_ok)
    throw std::runtime_error("dataset " + name + " fails its checksum (corrupt checkpoint): stored " +
                             std::to_string(expected) + ", computed " + std::to_string(local));
}

void CheckpointFile::check_header() const {
  const std::string format = h5_has_attr(file_, "format") ? h5_read_attr_string(file_, "format") : "";
  if (format != kCheckpointFormat) throw std::runtime_error("not a gridtrain checkpoint (format = '" + format + "')");
  const long long version = h5_read_attr_int(file_, "version");
  if (version != kCheckpointVersion)
    throw std::runtime_error("format version " + std::to_string(version) + "; this gridtrain reads version " +
                             std::to_string(kCheckpointVersion));
}

void CheckpointFile::flush() {
  seal();
  errno = 0;
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) throw write_error("cannot flush the file", path_);
}

void CheckpointFile::close() {
  if (file_.get() >= 0) seal();
  const hid_t id = file_.release();
  errno = 0;
  if (id >= 0 && H5Fclose(id) < 0) throw write_error("cannot close the file", path_);
}

}  // namespace gridtrain
