#include "gridtrain/data/text_fidelity.hpp"

#include <algorithm>

namespace gridtrain {
namespace {

// The length of the valid UTF-8 sequence at s[i] (RFC 3629, Table 3-7 of Unicode 15: no
// overlongs, surrogates or code points past U+10FFFF), or 0 when it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = b(0);
  auto tail = [&](std::size_t n, unsigned lo, unsigned hi) -> std::size_t {  // b(1) in [lo, hi], the rest 80..BF
    if (b(1) < lo || b(1) > hi) return 0;
    for (std::size_t k = 2; k <= n; ++k)
      if (b(k) < 0x80 || b(k) > 0xBF) return 0;
    return n + 1;
  };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return tail(1, 0x80, 0xBF);
  if (c == 0xE0) return tail(2, 0xA0, 0xBF);
  if (c == 0xED) return tail(2, 0x80, 0x9F);
  if (c >= 0xE1 && c <= 0xEF) return tail(2, 0x80, 0xBF);
  if (c == 0xF0) return tail(3, 0x90, 0xBF);
  if (c >= 0xF1 && c <= 0xF3) return tail(3, 0x80, 0xBF);
  if (c == 0xF4) return tail(3, 0x80, 0x8F);
  return 0;
}

}  // namespace

void Unrepresentable::add(const Unrepresentable& other) {
  invalid_bytes += other.invalid_bytes;
  meta_symbols += other.meta_symbols;
  first_invalid = std::min(first_invalid, other.first_invalid);
  first_meta = std::min(first_meta, other.first_meta);
}

Unrepresentable find_unrepresentable(std::string_view text, std::uint64_t offset) {
  static constexpr std::string_view kMeta = "\u2581";
  Unrepresentable u;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    if (n == 0) {
      if (u.invalid_bytes++ == 0) u.first_invalid = offset + i;
      ++i;
      continue;
    }
    if (text.compare(i, n, kMeta) == 0 && u.meta_symbols++ == 0) u.first_meta = offset + i;
    i += n;
  }
  return u;
}

}  // namespace gridtrain
