// The blend order of gridtrain's BlendCursor (data/blend.hpp), for tests/interop/megatron_blend.py
// to compare with megatron-core's build_blending_indices.
//
//   blend_order N W1 W2 ...   → one line per sample: its dataset and that dataset's sample index
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gridtrain/data/blend.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: blend_order N W1 W2 ... (normalized weights)\n");
    return 2;
  }
  std::vector<double> weights;
  for (int i = 2; i < argc; ++i) weights.push_back(std::strtod(argv[i], nullptr));
  gridtrain::BlendCursor cursor(weights);
  for (long long j = 0, n = std::atoll(argv[1]); j < n; ++j) {
    const auto [dataset, sample] = cursor.next();
    std::printf("%d %llu\n", dataset, static_cast<unsigned long long>(sample));
  }
}
