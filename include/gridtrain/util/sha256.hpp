// SHA-256 (FIPS 180-4, through OpenSSL's EVP): the corpus checksums of prepared data files.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include <openssl/evp.h>

namespace gridtrain {

/// An incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void add(const void* data, std::size_t n);
  /// The digest of what was added, as 64 lowercase hex digits; call once.
  std::string hex_digest();

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

/// Hex SHA-256 of bytes.
std::string sha256_hex(const std::string& bytes);

}  // namespace gridtrain
