#include "gridtrain/config/data_split.hpp"

#include <algorithm>
#include <regex>
#include <vector>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

std::array<double, 3> split_weights(const std::string& text) {
  // Megatron takes every run of [.0-9] as a number; gridtrain asks for exactly such numbers and commas.
  static const std::regex number(R"(\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*)");
  const std::string where = "data.split = '" + text + "': ", valid =
      "; valid: 1 to 3 comma-separated weights of train, validation and test, e.g. 969,30,1";
  std::vector<double> w;
  for (std::size_t begin = 0;;) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    std::smatch m;
    if (!std::regex_match(item, m, number)) throw Error(where + "'" + item + "' is not a non-negative decimal number (digits and one '.', no exponent)" + valid);
    w.push_back(std::stod(m[1].str()));
    if (end == text.size()) break;
    begin = end + 1;
  }
  double sum = 0;
  for (double x : w) sum += x;
  if (w.size() > 3) throw Error(where + "more than 3 weights" + valid);
  if (sum <= 0) throw Error(where + "the weights sum to 0" + valid);
  std::array<double, 3> out{};
  std::copy(w.begin(), w.end(), out.begin());
  return out;
}

}  // namespace gridtrain
