#include "gridtrain/util/sha256.hpp"

#include <cstdio>

namespace gridtrain {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }

void Sha256::add(const void* data, std::size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }

std::string Sha256::hex_digest() {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx_.get(), d, &len);
  std::string out;
  char byte[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", d[i]);
    out += byte;
  }
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 d;
  d.add(bytes.data(), bytes.size());
  return d.hex_digest();
}

}  // namespace gridtrain
