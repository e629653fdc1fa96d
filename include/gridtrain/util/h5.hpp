// Small RAII owner for HDF5 identifiers (files, datasets, spaces, property lists, attributes),
// so that every early return or exception closes what was opened.
#pragma once
#include <string>
#include <vector>
#include <utility>

#include <hdf5.h>

namespace gridtrain {

class H5Id {
 public:
  H5Id() = default;
  /// Takes ownership of id; a negative id (HDF5's failure value) throws std::runtime_error(what).
  H5Id(hid_t id, const std::string& what);
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  H5Id& operator=(H5Id&& o) noexcept {
    std::swap(id_, o.id_);
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id();
  hid_t get() const { return id_; }
  /// Gives up ownership (the caller closes the id).
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// Turns off HDF5's automatic error-stack printing; gridtrain reports errors itself.
void h5_silence_errors();

/// The innermost entry of this thread's HDF5 error stack ("function: description"), or "".
std::string h5_error_detail();

/// A dataset-transfer property list for collective MPI-IO.
H5Id h5_collective_xfer();

/// Attribute helpers on an object (file root, group or dataset). Throw std::runtime_error
/// naming the attribute when it is missing or has the wrong type. Strings are read whether fixed-
/// or variable-length (h5py's default); integers at any width, as long long (range-check what you
/// narrow); an unsigned value beyond LLONG_MAX throws gridtrain::Error naming it as stored.
void h5_write_attr(hid_t obj, const std::string& name, const std::string& value);
void h5_write_attr(hid_t obj, const std::string& name, long long value);
std::string h5_read_attr_string(hid_t obj, const std::string& name);
long long h5_read_attr_int(hid_t obj, const std::string& name);
/// A 1-D fp64 attribute (values.size() >= 1).
void h5_write_attr(hid_t obj, const std::string& name, const std::vector<double>& values);
std::vector<double> h5_read_attr_doubles(hid_t obj, const std::string& name);
bool h5_has_attr(hid_t obj, const std::string& name);

/// A 1-D uint8 dataset `name` (intermediate groups created) holding bytes, and back. Throw
/// std::runtime_error naming the dataset.
void h5_write_bytes(hid_t file, const std::string& name, const std::string& bytes);
std::string h5_read_bytes(hid_t file, const std::string& name);

}  // namespace gridtrain
