// The problems parse_config reports for CLI overrides, for the tests of refused keys.
#pragma once
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain::test {

/// parse_config("", "test", overrides)'s gridtrain::Error message, or "" when it parses.
inline std::string config_problems(const std::vector<std::string>& overrides) {
  try {
    parse_config("", "test", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gridtrain::test
