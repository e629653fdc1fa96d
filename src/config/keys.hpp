// Internal: the key table binding each deck key to its Config field, parser and validator.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain::detail {

struct Key {
  KeyInfo info;
  /// Parses text into the field of c; returns an error message (without the key name) or nullopt.
  std::function<std::optional<std::string>(Config& c, const std::string& text)> assign;
  /// The field's current value as deck text.
  std::function<std::string(const Config& c)> show;
};

const std::vector<Key>& key_table();

}  // namespace gridtrain::detail
