#include "gridtrain/data/dataset_part.hpp"

#include <algorithm>
#include <stdexcept>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

StoredIntegers::Part dataset_part(hid_t file, const std::string& path, const std::string& name,
                              std::vector<std::uint64_t>& dims) {
  if (H5Lexists(file, name.substr(0, name.rfind('/')).c_str(), H5P_DEFAULT) <= 0 ||
      H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    throw std::runtime_error("dataset " + name + " is missing");
  H5Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "cannot open dataset " + name);
  H5Id type(H5Dget_type(ds), "H5Dget_type");
  H5Id space(H5Dget_space(ds), "H5Dget_space");
  if (H5Tget_class(type) != H5T_INTEGER) throw std::runtime_error("dataset " + name + " is not integer");
  std::vector<hsize_t> extent(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space))));
  H5Sget_simple_extent_dims(space, extent.data(), nullptr);
  dims.assign(extent.begin(), extent.end());
  StoredIntegers::Part p;
  p.file = path;
  p.count = 1;
  for (auto d : dims) p.count *= d;
  p.width = static_cast<int>(H5Tget_size(type));
  p.is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
  H5Id dcpl(H5Dget_create_plist(ds), "H5Dget_create_plist");
  const bool plain = H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0 &&
                     H5Tget_order(type) == H5T_ORDER_LE && (p.width == 1 || p.width == 2 || p.width == 4 || p.width == 8);
  const haddr_t at = H5Dget_offset(ds);
  if (!plain || (p.count > 0 && at == HADDR_UNDEF))
    throw Error(name + " is chunked, compressed or big-endian; gridtrain reads it straight from a contiguous "
                "little-endian dataset: write it with `gridtrain prepare`, or with h5py without chunks or compression");
  p.offset = p.count > 0 ? at : 0;
  return p;
}

}  // namespace gridtrain
