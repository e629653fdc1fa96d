// What SentencePiece cannot carry through encode → decode unchanged, even with identity
// normalization and byte fallback (tokenizer.hpp): bytes that are not UTF-8 (RFC 3629: its
// normalizer turns each into U+FFFD before byte fallback sees it) and U+2581 "▁", its whitespace
// meta symbol, which decodes as a space. Byte-level tokenization carries both.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace gridtrain {

struct Unrepresentable {
  static constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t invalid_bytes = 0;  ///< bytes that are not part of a valid UTF-8 sequence
  std::uint64_t meta_symbols = 0;   ///< occurrences of U+2581
  std::uint64_t first_invalid = kNone, first_meta = kNone;  ///< byte offsets in the input (kNone: none)

  bool any() const { return invalid_bytes + meta_symbols > 0; }
  /// Counts summed, first offsets the smaller: the findings of two parts of one input.
  void add(const Unrepresentable& other);
};

/// The findings in text, whose first byte is at `offset` in the input. A sequence cut off by the
/// end of text counts as invalid: pass whole lines.
Unrepresentable find_unrepresentable(std::string_view text, std::uint64_t offset);

/// "130 bytes that are not UTF-8 (the first at byte 3456, line 12; each is encoded as U+FFFD)
/// and 2 '▁' (U+2581, ...)", with line numbers from line_of(offset) (1-based).
template <class LineOf>
std::string describe(const Unrepresentable& u, LineOf line_of) {
  auto at = [&](std::uint64_t offset) {
    return "the first at byte " + std::to_string(offset) + ", line " + std::to_string(line_of(offset));
  };
  std::string text;
  if (u.invalid_bytes > 0)
    text = std::to_string(u.invalid_bytes) + " byte(s) that are not UTF-8 (" + at(u.first_invalid) +
           "; each is encoded as U+FFFD)";
  if (u.meta_symbols > 0)
    text += (text.empty() ? "" : " and ") + std::to_string(u.meta_symbols) + " '\u2581' (U+2581, " + at(u.first_meta) +
            "; SentencePiece's space symbol, decoded as a space)";
  return text;
}

}  // namespace gridtrain
