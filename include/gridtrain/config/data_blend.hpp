// data.blend: weighted datasets in Megatron's --data-path syntax ("0.7 pathA 0.3 pathB"), parsed
// where the deck key checks it and where data/blend.hpp draws from the datasets.
#pragma once
#include <string>
#include <vector>

namespace gridtrain {

/// The datasets of a blend and their weights, normalized to sum 1.
struct BlendSpec {
  std::vector<double> weights;
  std::vector<std::string> paths;
  /// "0.7 pathA 0.3 pathB" with the normalized weights (%.6g): what checkpoints record.
  std::string text() const;
};

/// Throws gridtrain::Error "data.blend = 'TEXT': ..." naming the item when text is not pairs of a
/// positive finite decimal weight and a path, at least two, each path once.
BlendSpec parse_blend(const std::string& text);

}  // namespace gridtrain
