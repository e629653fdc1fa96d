// piece_selection (checkpoint/checkpoint_file.hpp): where a ZeRO piece — a flat range of a
// row-major tp-local tensor — lies in the global dataset, for every range of small tensors split
// by rows, by columns, in fused parts, with padding rows, and replicated (a 4-D one), against
// the element-by-element mapping; and how many rectangles it takes.
#include <catch2/catch.hpp>

#include <numeric>

#include "gridtrain/checkpoint/checkpoint_file.hpp"

using namespace gridtrain;

namespace {

using Dims = std::vector<hsize_t>;

hsize_t volume(const Dims& d) { return std::accumulate(d.begin(), d.end(), hsize_t{1}, std::multiplies<>()); }

// Row-major flat index in `shape` of coordinates `at`.
hsize_t flat(const Dims& shape, const Dims& at) {
  hsize_t i = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) i = i * shape[k] + at[k];
  return i;
}

// The global flat index of each element of the local tensor (whole's blocks one after another,
// then padding rows: none), by walking it element by element.
std::vector<long long> expected(const Dims& global, const Slab& whole, const Dims& local) {
  std::vector<long long> out;
  const hsize_t inner = volume(local) / local[0], block_rows = local[0] / whole.blocks;
  for (hsize_t i = 0; i < volume(local); ++i) {
    const hsize_t row = i / inner, b = row / block_rows, r = row % block_rows;
    if (r >= whole.count[0]) {
      out.push_back(-1);  // padding
      continue;
    }
    Dims at(local.size());
    hsize_t rest = i % inner;
    for (std::size_t k = local.size(); k-- > 1;) at[k] = rest % local[k], rest /= local[k];
    at[0] = r;
    const Slab place = whole.block(b);
    for (std::size_t k = 0; k < at.size(); ++k) at[k] += place.offset[k];
    out.push_back(static_cast<long long>(flat(global, at)));
  }
  return out;
}

// The global flat indices a selection covers, rectangle after rectangle, each row-major.
std::vector<long long> covered(const Dims& global, const Selection& s) {
  std::vector<long long> out;
  for (const Slab& r : s)
    for (hsize_t i = 0; i < r.elements(); ++i) {
      Dims at(r.count.size());
      hsize_t rest = i;
      for (std::size_t k = r.count.size(); k-- > 0;) at[k] = r.offset[k] + rest % r.count[k], rest /= r.count[k];
      out.push_back(static_cast<long long>(flat(global, at)));
    }
  return out;
}

struct Case {
  const char* what;
  Dims global;
  Slab whole;
  Dims local;
};

}  // namespace

TEST_CASE("piece_selection puts every flat range of a local tensor where its elements are", "[checkpoint]") {
  const std::vector<Case> cases = {
      {"rows of a matrix, tp rank 1 of 2", {10, 3}, Slab{{5, 0}, {5, 3}}, {5, 3}},
      {"fused q, k, v rows, tp rank 1 of 2", {12, 4}, Slab{{2, 0}, {2, 4}, false, 3, 4}, {6, 4}},
      {"columns (row-parallel), tp rank 1 of 2", {4, 6}, Slab{{0, 3}, {4, 3}}, {4, 3}},
      {"a padded vocabulary: 5 rows over tp 2, rank 1", {5, 2}, Slab{{3, 0}, {2, 2}}, {3, 2}},
      {"a fused bias, tp rank 2 of 3", {9}, Slab{{2}, {1}, false, 3, 3}, {3}},
      {"a replicated 4-D convolution weight", {2, 3, 3, 3}, Slab::all({2, 3, 3, 3}), {2, 3, 3, 3}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const auto want = expected(c.global, c.whole, c.local);
    const hsize_t n = volume(c.local);
    for (hsize_t begin = 0; begin < n; ++begin)
      for (hsize_t count = 1; begin + count <= n; ++count) {
        CAPTURE(begin, count);
        const Selection s = piece_selection(c.whole, c.local, begin, count);
        std::vector<long long> in_file(want.begin() + static_cast<std::ptrdiff_t>(begin),
                                       want.begin() + static_cast<std::ptrdiff_t>(begin + count));
        while (!in_file.empty() && in_file.back() < 0) in_file.pop_back();  // padding: at the end, in no file
        REQUIRE(covered(c.global, s) == in_file);
        CHECK(elements(s) == in_file.size());
        // At most 2·rank − 1 rectangles for each block the range touches (a matrix: 3).
        const hsize_t block_size = n / c.whole.blocks;
        const hsize_t blocks = (begin + count - 1) / block_size - begin / block_size + 1;
        CHECK(s.size() <= blocks * (2 * c.local.size() - 1));
      }
  }
}

TEST_CASE("piece_selection of nothing, or of a rank that holds nothing, selects nothing", "[checkpoint]") {
  CHECK(piece_selection(Slab{{0, 0}, {4, 4}}, {4, 4}, 3, 0).empty());
  CHECK(piece_selection(Slab::none(), {4, 4}, 0, 16).empty());
}
