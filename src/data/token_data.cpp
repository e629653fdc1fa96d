#include "gridtrain/data/token_data.hpp"

#include <algorithm>
#include <filesystem>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

std::vector<std::int32_t> read_split(hid_t file, const std::string& name) {
  if (H5Lexists(file, name.substr(0, name.rfind('/')).c_str(), H5P_DEFAULT) <= 0 ||
      H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    throw std::runtime_error("dataset " + name + " is missing");
  H5Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "cannot open dataset " + name);
  H5Id type(H5Dget_type(ds), "H5Dget_type");
  if (H5Tget_class(type) != H5T_INTEGER) throw std::runtime_error("dataset " + name + " is not integer tokens");
  H5Id space(H5Dget_space(ds), "H5Dget_space");
  if (H5Sget_simple_extent_ndims(space) != 1) throw std::runtime_error("dataset " + name + " is not 1-D");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  std::vector<std::int32_t> out(n);
  H5Id xfer = h5_collective_xfer();
  if (n > 0 && H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, xfer, out.data()) < 0)
    throw std::runtime_error("cannot read dataset " + name);
  return out;
}

}  // namespace

TokenData load_tokens(const std::string& path, MPI_Comm comm, std::size_t min_tokens,
                      const std::string& prepare_hint) {
  TokenData d;
  const std::string where = "data.path = '" + path + "': ";
  h5_silence_errors();
  // Two phases, so that no rank enters the collective open while another already gave up.
  agree(comm, [&] {
    if (!std::filesystem::exists(path)) throw Error(where + "file not found. " + prepare_hint);
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(where + "not an HDF5 file (write one with `gridtrain prepare`)");
  });
  agree(comm, [&] {
    try {
      H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
      H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
      H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open the file");
      d.vocab_size = static_cast<int>(h5_read_attr_int(file, "vocab_size"));
      d.tokenizer = h5_read_attr_string(file, "tokenizer");
      d.sha256 = h5_has_attr(file, "sha256") ? h5_read_attr_string(file, "sha256") : "";
      d.train = read_split(file, "/train/tokens");
      d.val = read_split(file, "/val/tokens");
    } catch (const std::runtime_error& e) {
      throw Error(where + e.what() + "; expected the layout of `gridtrain prepare` (/train/tokens, /val/tokens, "
                  "attributes vocab_size and tokenizer)");
    }
    if (d.vocab_size < 1) throw Error(where + "vocab_size = " + std::to_string(d.vocab_size) + "; valid: >= 1");
    for (const auto* split : {&d.train, &d.val}) {
      const char* name = split == &d.train ? "/train/tokens" : "/val/tokens";
      auto [lo, hi] = std::minmax_element(split->begin(), split->end());
      if (lo != split->end() && (*lo < 0 || *hi >= d.vocab_size))
        throw Error(where + name + " holds token " + std::to_string(*lo < 0 ? *lo : *hi) +
                    " outside [0, vocab_size = " + std::to_string(d.vocab_size) + ")");
      if (split->size() < min_tokens)
        throw Error(where + name + " has " + std::to_string(split->size()) + " tokens; at least " +
                    std::to_string(min_tokens) + " (model.block_size + 1) are needed");
    }
  });
  return d;
}

}  // namespace gridtrain
