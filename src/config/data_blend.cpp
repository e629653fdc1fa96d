#include "gridtrain/config/data_blend.hpp"

#include <cmath>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

std::string BlendSpec::text() const {
  std::string out;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    char w[32];
    std::snprintf(w, sizeof w, "%.6g", weights[i]);
    if (i > 0) out += ' ';
    out += std::string(w) + ' ' + paths[i];
  }
  return out;
}

BlendSpec parse_blend(const std::string& text) {
  static const std::regex number(R"(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?)");
  const std::string where = "data.blend = '" + text + "': ",
                    valid = "; valid: pairs of a weight and a dataset path, e.g. '0.7 data/a 0.3 data/b' "
                            "(Megatron's --data-path)";
  std::istringstream in(text);
  std::vector<std::string> items;
  for (std::string item; in >> item;) items.push_back(item);
  if (items.size() % 2 != 0) throw Error(where + "an odd number of items (" + std::to_string(items.size()) + ")" + valid);
  if (items.size() < 4) throw Error(where + "fewer than two datasets (one is data.path)" + valid);
  BlendSpec b;
  double sum = 0;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < items.size(); i += 2) {
    const std::string &w = items[i], &path = items[i + 1];
    if (!std::regex_match(w, number) || !(std::stod(w) > 0) || !std::isfinite(std::stod(w)))
      throw Error(where + "weight '" + w + "' of '" + path + "' is not a positive number" + valid);
    if (!seen.insert(path).second) throw Error(where + "'" + path + "' is named twice; give it one weight" + valid);
    b.weights.push_back(std::stod(w));
    b.paths.push_back(path);
    sum += b.weights.back();
  }
  for (double& w : b.weights) w /= sum;
  return b;
}

}  // namespace gridtrain
