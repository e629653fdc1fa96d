#include "gridtrain/data/token_data.hpp"

#include <filesystem>
#include <limits>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

// A split's tokens, read at the dataset's own integer width and checked against [0, vocab)
// before they are narrowed to int32 (a wider token is named as it is stored, not as it clips).
std::vector<std::int32_t> read_split(hid_t file, const std::string& name, long long vocab) {
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
  const bool is_unsigned = H5Tget_sign(type) == H5T_SGN_NONE;
  const bool narrow = H5Tget_size(type) < 4 || (H5Tget_size(type) == 4 && !is_unsigned);
  std::vector<std::int32_t> out(n);
  H5Id xfer = h5_collective_xfer();
  auto bad = [&](const std::string& token) {
    return Error(name + " holds token " + token + " outside [0, vocab_size = " + std::to_string(vocab) + ")");
  };
  if (narrow) {  // fits int32 as stored
    if (n > 0 && H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, xfer, out.data()) < 0)
      throw std::runtime_error("cannot read dataset " + name);
    for (auto t : out)
      if (t < 0 || t >= vocab) throw bad(std::to_string(t));
    return out;
  }
  auto read_wide = [&](auto zero, hid_t mem_type) {  // uint32, int64, uint64: read wide, check, narrow
    std::vector<decltype(zero)> wide(n);
    if (n > 0 && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, xfer, wide.data()) < 0)
      throw std::runtime_error("cannot read dataset " + name);
    for (std::size_t i = 0; i < n; ++i) {
      if (wide[i] < zero || wide[i] >= static_cast<decltype(zero)>(vocab)) throw bad(std::to_string(wide[i]));
      out[i] = static_cast<std::int32_t>(wide[i]);
    }
  };
  if (is_unsigned) read_wide(std::uint64_t{0}, H5T_NATIVE_UINT64);
  else read_wide(std::int64_t{0}, H5T_NATIVE_INT64);
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
      const long long vocab = h5_read_attr_int(file, "vocab_size");
      if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max())
        throw Error(where + "vocab_size = " + std::to_string(vocab) + "; valid: 1 .. " +
                    std::to_string(std::numeric_limits<std::int32_t>::max()));
      d.vocab_size = static_cast<int>(vocab);
      d.tokenizer = h5_read_attr_string(file, "tokenizer");
      d.sha256 = h5_has_attr(file, "sha256") ? h5_read_attr_string(file, "sha256") : "";
      d.train = read_split(file, "/train/tokens", vocab);
      d.val = read_split(file, "/val/tokens", vocab);
    } catch (const Error& e) {
      throw Error(std::string(e.what()).starts_with(where) ? e.what() : where + e.what());
    } catch (const std::runtime_error& e) {
      throw Error(where + e.what() + "; expected the layout of `gridtrain prepare` (/train/tokens, /val/tokens, "
                  "attributes vocab_size and tokenizer)");
    }
    for (const auto* split : {&d.train, &d.val}) {
      const char* name = split == &d.train ? "/train/tokens" : "/val/tokens";
      if (split->size() < min_tokens)
        throw Error(where + name + " has " + std::to_string(split->size()) + " tokens; at least " +
                    std::to_string(min_tokens) + " (model.block_size + 1) are needed");
    }
  });
  return d;
}

}  // namespace gridtrain
