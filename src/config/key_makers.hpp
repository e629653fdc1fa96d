// Internal: the makers of typed deck keys (integer, real, text, enum, boolean) for the key
// tables of keys.cpp and sparsity_keys.cpp. Each returns a Key whose parser names what is valid.
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "keys.hpp"

namespace gridtrain::detail {

// A key's field in Config, e.g. GT_REF(train.steps): what the makers below take as `ref`.
#define GT_REF(field) [](auto& c) -> auto& { return c.field; }

inline std::string show_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

template <class T>
std::optional<T> parse_number(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// Integer key in [lo, hi].
template <class T, class Ref>
Key int_key(std::string name, Ref ref, std::string help, T lo, T hi = std::numeric_limits<T>::max()) {
  Config defaults;
  std::string valid = "integer >= " + std::to_string(lo);
  if (hi != std::numeric_limits<T>::max()) valid = "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return {{name, std::to_string(ref(defaults)), std::move(help), valid},
          [ref, lo, hi, valid](Config& c, const std::string& text) -> std::optional<std::string> {
            auto v = parse_number<T>(text);
            if (!v) return "not an integer; valid: " + valid;
            if (*v < lo || *v > hi) return "out of range; valid: " + valid;
            ref(c) = *v;
            return std::nullopt;
          },
          [ref](const Config& c) { return std::to_string(ref(c)); }};
}

// Real key in [lo, hi]; lo_open excludes lo itself.
template <class Ref>
Key real_key(std::string name, Ref ref, std::string help, double lo, bool lo_open,
             double hi = std::numeric_limits<double>::infinity()) {
  Config defaults;
  std::string valid = std::string("number ") + (lo_open ? "> " : ">= ") + show_double(lo);
  if (std::isfinite(hi)) valid += " and <= " + show_double(hi);
  return {{name, show_double(ref(defaults)), std::move(help), valid},
          [ref, lo, lo_open, hi, valid](Config& c, const std::string& text) -> std::optional<std::string> {
            auto v = parse_number<double>(text);
            if (!v || !std::isfinite(*v)) return "not a number; valid: " + valid;
            if (*v < lo || (lo_open && *v == lo) || *v > hi) return "out of range; valid: " + valid;
            ref(c) = *v;
            return std::nullopt;
          },
          [ref](const Config& c) { return show_double(ref(c)); }};
}

// String key: any non-empty text.
template <class Ref>
Key text_key(std::string name, Ref ref, std::string help) {
  Config defaults;
  return {{name, ref(defaults), std::move(help), "non-empty text"},
          [ref](Config& c, const std::string& text) -> std::optional<std::string> {
            if (text.empty()) return "empty; valid: non-empty text";
            ref(c) = text;
            return std::nullopt;
          },
          [ref](const Config& c) { return ref(c); }};
}

// Enum key: one of enum_names(E{}).
template <class Ref>
Key enum_key(std::string name, Ref ref, std::string help) {
  using E = std::remove_cvref_t<decltype(ref(std::declval<Config&>()))>;
  Config defaults;
  std::string valid = "one of";
  for (const char* n : enum_names(E{})) valid += std::string(" ") + n;
  return {{name, name_of(ref(defaults)), std::move(help), valid},
          [ref, valid](Config& c, const std::string& text) -> std::optional<std::string> {
            const auto names = enum_names(E{});
            const auto it = std::find(names.begin(), names.end(), text);
            if (it == names.end()) return (text.empty() ? "empty" : "not recognised") + ("; valid: " + valid);
            ref(c) = static_cast<E>(it - names.begin());
            return std::nullopt;
          },
          [ref](const Config& c) { return std::string(name_of(ref(c))); }};
}

// Boolean key: true/false, yes/no, on/off, 1/0.
template <class Ref>
Key bool_key(std::string name, Ref ref, std::string help) {
  Config defaults;
  const std::string valid = "true or false";
  auto show = [](bool b) { return std::string(b ? "true" : "false"); };
  return {{name, show(ref(defaults)), std::move(help), valid},
          [ref, valid](Config& c, const std::string& text) -> std::optional<std::string> {
            if (text == "true" || text == "yes" || text == "on" || text == "1") ref(c) = true;
            else if (text == "false" || text == "no" || text == "off" || text == "0") ref(c) = false;
            else return "not a boolean; valid: " + valid;
            return std::nullopt;
          },
          [ref, show](const Config& c) { return show(ref(c)); }};
}

}  // namespace gridtrain::detail
