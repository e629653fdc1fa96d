// Small non-cryptographic hashes for seeds (the corpus checksum is SHA-256, util/sha256.hpp).
#pragma once
#include <cstdint>
#include <string_view>

namespace gridtrain {

/// splitmix64 (Steele, Lea & Flood 2014, "Fast Splittable Pseudorandom Number Generators"): a
/// counter-based 64-bit mixer.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// 64-bit FNV-1a of s (Fowler, Noll & Vo): a stable hash of a name.
constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

}  // namespace gridtrain
