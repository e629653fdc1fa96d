#include "gridtrain/util/h5.hpp"

#include <limits>
#include <stdexcept>
#include <vector>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

H5Id::H5Id(hid_t id, const std::string& what) : id_(id) {
  if (id_ < 0) throw std::runtime_error(what);
}

H5Id::~H5Id() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
}

void h5_silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string h5_error_detail() {
  std::string deepest;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD,
           [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
             *static_cast<std::string*>(out) = std::string(e->func_name) + ": " + e->desc;
             return 0;
           },
           &deepest);
  return deepest;
}

H5Id h5_collective_xfer() {
  H5Id xfer(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate");
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  return xfer;
}

void h5_write_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5Id type(H5Tcopy(H5T_C_S1), "H5Tcopy");
  H5Tset_size(type, value.empty() ? 1 : value.size());
  H5Tset_cset(type, H5T_CSET_UTF8);
  H5Id space(H5Screate(H5S_SCALAR), "H5Screate");
  H5Id attr(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
            "cannot create attribute '" + name + "'");
  if (H5Awrite(attr, type, value.c_str()) < 0) throw std::runtime_error("cannot write attribute '" + name + "'");
}

void h5_write_attr(hid_t obj, const std::string& name, long long value) {
  H5Id space(H5Screate(H5S_SCALAR), "H5Screate");
  H5Id attr(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
            "cannot create attribute '" + name + "'");
  if (H5Awrite(attr, H5T_NATIVE_LLONG, &value) < 0) throw std::runtime_error("cannot write attribute '" + name + "'");
}

bool h5_has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string h5_read_attr_string(hid_t obj, const std::string& name) {
  if (!h5_has_attr(obj, name)) throw std::runtime_error("attribute '" + name + "' is missing");
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "cannot open attribute '" + name + "'");
  H5Id type(H5Aget_type(attr), "H5Aget_type");
  if (H5Tget_class(type) != H5T_STRING) throw std::runtime_error("attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type) > 0) {  // h5py's default for str attributes
    H5Id mem(H5Tcopy(H5T_C_S1), "H5Tcopy");
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    char* text = nullptr;
    if (H5Aread(attr, mem, &text) < 0) throw std::runtime_error("cannot read attribute '" + name + "'");
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::vector<char> buf(H5Tget_size(type) + 1, '\0');
  H5Id mem(H5Tcopy(H5T_C_S1), "H5Tcopy");
  H5Tset_size(mem, buf.size());
  H5Tset_cset(mem, H5Tget_cset(type));
  if (H5Aread(attr, mem, buf.data()) < 0) throw std::runtime_error("cannot read attribute '" + name + "'");
  return std::string(buf.data());
}

long long h5_read_attr_int(hid_t obj, const std::string& name) {
  if (!h5_has_attr(obj, name)) throw std::runtime_error("attribute '" + name + "' is missing");
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "cannot open attribute '" + name + "'");
  H5Id type(H5Aget_type(attr), "H5Aget_type");
  if (H5Tget_class(type) != H5T_INTEGER) throw std::runtime_error("attribute '" + name + "' is not an integer");
  // Read as stored: HDF5 would clip an unsigned value above LLONG_MAX to LLONG_MAX.
  if (H5Tget_sign(type) == H5T_SGN_NONE) {
    unsigned long long u = 0;
    if (H5Aread(attr, H5T_NATIVE_ULLONG, &u) < 0) throw std::runtime_error("cannot read attribute '" + name + "'");
    if (u > static_cast<unsigned long long>(std::numeric_limits<long long>::max()))
      throw Error(name + " = " + std::to_string(u) + " (stored unsigned); valid: at most " +
                  std::to_string(std::numeric_limits<long long>::max()));
    return static_cast<long long>(u);
  }
  long long v = 0;
  if (H5Aread(attr, H5T_NATIVE_LLONG, &v) < 0) throw std::runtime_error("cannot read attribute '" + name + "'");
  return v;
}

void h5_write_attr(hid_t obj, const std::string& name, const std::vector<double>& values) {
  const hsize_t n = values.size();
  H5Id space(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
  H5Id attr(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT),
            "cannot create attribute '" + name + "'");
  if (H5Awrite(attr, H5T_NATIVE_DOUBLE, values.data()) < 0)
    throw std::runtime_error("cannot write attribute '" + name + "'");
}

std::vector<double> h5_read_attr_doubles(hid_t obj, const std::string& name) {
  if (!h5_has_attr(obj, name)) throw std::runtime_error("attribute '" + name + "' is missing");
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "cannot open attribute '" + name + "'");
  H5Id type(H5Aget_type(attr), "H5Aget_type");
  H5Id space(H5Aget_space(attr), "H5Aget_space");
  if (H5Tget_class(type) != H5T_FLOAT || H5Sget_simple_extent_ndims(space) != 1)
    throw std::runtime_error("attribute '" + name + "' is not a 1-D float array");
  std::vector<double> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  if (H5Aread(attr, H5T_NATIVE_DOUBLE, v.data()) < 0) throw std::runtime_error("cannot read attribute '" + name + "'");
  return v;
}

void h5_write_bytes(hid_t file, const std::string& name, const std::string& bytes) {
  const hsize_t n = bytes.size();
  H5Id space(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id ds(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), "cannot create " + name);
  if (n > 0 && H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw std::runtime_error("cannot write " + name);
}

std::string h5_read_bytes(hid_t file, const std::string& name) {
  H5Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "cannot open " + name);
  H5Id space(H5Dget_space(ds), "H5Dget_space");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  std::string bytes(n, '\0');
  if (n > 0 && H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw std::runtime_error("cannot read " + name);
  return bytes;
}

}  // namespace gridtrain
