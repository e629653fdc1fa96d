// The message of the gridtrain::Error a call throws, for tests of error texts.
#pragma once
#include <functional>
#include <string>

#include "gridtrain/util/error.hpp"

namespace gridtrain::test {

/// What fn throws as gridtrain::Error, or "" when it returns (other exceptions propagate).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gridtrain::test
