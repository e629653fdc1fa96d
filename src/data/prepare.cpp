#include "gridtrain/data/prepare.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <openssl/evp.h>

#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

void write_split(hid_t file, const std::string& group, const unsigned char* data, hsize_t n) {
  H5Id g(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "cannot create group " + group);
  H5Id space(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
  H5Id ds(H5Dcreate2(g, "tokens", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          "cannot create dataset " + group + "/tokens");
  if (H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw std::runtime_error("cannot write " + group + "/tokens");
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  char byte[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

PrepareReport prepare_text(const std::string& input, const std::string& output, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw Error("prepare: --val-fraction " + std::to_string(val_fraction) + " is invalid; valid: 0 < F < 1");
  std::ifstream in(input, std::ios::binary);
  if (!in) throw Error("prepare: cannot read input file '" + input + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < 2) throw Error("prepare: input file '" + input + "' is empty or has fewer than 2 bytes");

  PrepareReport r;
  r.source_bytes = text.size();
  r.val_tokens = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(val_fraction * text.size()));
  r.train_tokens = r.source_bytes - r.val_tokens;
  r.sha256 = sha256_hex(text);

  const std::filesystem::path out(output);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  const std::string tmp = output + ".tmp";
  h5_silence_errors();
  try {
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "cannot create '" + tmp + "'");
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    write_split(file, "/train", bytes, r.train_tokens);
    write_split(file, "/val", bytes + r.train_tokens, r.val_tokens);
    h5_write_attr(file, "format", std::string("gridtrain-tokens"));
    h5_write_attr(file, "tokenizer", std::string("bytes"));
    h5_write_attr(file, "vocab_size", 256LL);
    h5_write_attr(file, "source", std::filesystem::path(input).filename().string());
    h5_write_attr(file, "source_bytes", static_cast<long long>(r.source_bytes));
    h5_write_attr(file, "sha256", r.sha256);
  } catch (const std::runtime_error& e) {
    std::filesystem::remove(tmp);
    throw Error("prepare: writing '" + output + "' failed: " + e.what());
  }
  std::filesystem::rename(tmp, output);
  return r;
}

}  // namespace gridtrain
