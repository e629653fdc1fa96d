// Image sets: `prepare idx` (data/prepare_idx.hpp) and their loading and cropping
// (data/image_data.hpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include "../support/corpus.hpp"
#include "../support/errors.hpp"
#include "gridtrain/data/image_data.hpp"
#include "gridtrain/data/prepare_idx.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;
using test::error_of;


TEST_CASE("prepare idx writes the IDX images and labels, gzipped or not, as they were", "[data]") {
  const auto dir = test::temp_dir("idx");
  std::string pixels, labels;
  for (int i = 0; i < 3 * 2 * 4; ++i) pixels += static_cast<char>(10 * i);
  labels = {2, 0, 1};
  test::write_idx(dir + "/tr-img.gz", {3, 2, 4}, pixels, true);
  test::write_idx(dir + "/tr-lab", {3}, labels, false);
  test::write_idx(dir + "/te-img", {1, 2, 4}, pixels.substr(0, 8), false);
  test::write_idx(dir + "/te-lab.gz", {1}, std::string(1, '\4'), true);
  const IdxReport r = prepare_idx({dir + "/tr-img.gz", dir + "/tr-lab", dir + "/te-img", dir + "/te-lab.gz", dir + "/s.h5"},
                                  MPI_COMM_SELF);
  CHECK(r.train == 3);
  CHECK(r.test == 1);
  CHECK(r.classes == 5);  // the largest label + 1
  const ImageData d = load_images(dir + "/s.h5", MPI_COMM_SELF, "HINT");
  REQUIRE(d.channels == 1);
  REQUIRE(d.height == 2);
  REQUIRE(d.width == 4);
  CHECK(d.sha256 == r.sha256);
  std::vector<std::int64_t> row(9);
  copy_image(d, d.train, 1, 0, 0, row.data());
  for (int p = 0; p < 8; ++p) CHECK(row[static_cast<std::size_t>(p)] == static_cast<unsigned char>(10 * (8 + p)));
  CHECK(row[8] == 0);  // image 1's label
  copy_image(d, d.test, 0, 0, 0, row.data());
  CHECK(row[8] == 4);
}

TEST_CASE("a stray label is reported as classes no image has; --classes refuses it by name and index", "[data]") {
  const auto dir = test::temp_dir("idx-classes");
  test::write_idx(dir + "/img", {3, 1, 1}, std::string(3, '\0'), false);
  test::write_idx(dir + "/lab", {3}, std::string{0, 1, 4}, false);  // 2 and 3 never occur
  const IdxReport r = prepare_idx({dir + "/img", dir + "/lab", dir + "/img", dir + "/lab", dir + "/s.h5"}, MPI_COMM_SELF);
  CHECK(r.classes == 5);
  CHECK(r.unused == std::vector<int>{2, 3});
  IdxOptions bounded{dir + "/img", dir + "/lab", dir + "/img", dir + "/lab", dir + "/b.h5", 4};
  CHECK_THAT(error_of([&] { prepare_idx(bounded, MPI_COMM_SELF); }),
             Catch::Contains("'" + dir + "/lab' holds label 4 at index 2; --classes 4 allows 0..3"));
  bounded.classes = 6;  // a wider head, declared: its unused classes are still named
  const IdxReport wide = prepare_idx(bounded, MPI_COMM_SELF);
  CHECK(wide.classes == 6);
  CHECK(wide.unused == std::vector<int>{2, 3, 5});
}

TEST_CASE("copy_image shifts by (dy, dx) with zeros where the shift uncovers (random crop)", "[data]") {
  const auto dir = test::temp_dir("crop");
  std::string pixels;
  for (int i = 0; i < 9; ++i) pixels += static_cast<char>(i + 1);  // one 3x3 image 1..9
  test::write_idx(dir + "/i", {1, 3, 3}, pixels, false);
  test::write_idx(dir + "/l", {1}, std::string(1, '\1'), false);
  prepare_idx({dir + "/i", dir + "/l", dir + "/i", dir + "/l", dir + "/s.h5"}, MPI_COMM_SELF);
  const ImageData d = load_images(dir + "/s.h5", MPI_COMM_SELF, "");
  std::vector<std::int64_t> row(10);
  copy_image(d, d.train, 0, 1, -1, row.data());  // out[y][x] = in[y + 1][x - 1]
  CHECK(row == std::vector<std::int64_t>{0, 4, 5, 0, 7, 8, 0, 0, 0, 1});
}

TEST_CASE("bad image sets give errors that name the file and the problem", "[data]") {
  const auto dir = test::temp_dir("idx-bad");
  test::write_idx(dir + "/img", {2, 2, 2}, std::string(8, '\0'), false);
  test::write_idx(dir + "/lab3", {3}, std::string(3, '\0'), false);
  test::write_idx(dir + "/lab2", {2}, std::string(2, '\1'), false);
  std::ofstream(dir + "/text") << "not idx";
  auto prepare = [&](const std::string& images, const std::string& labels) {
    return error_of([&] { prepare_idx({images, labels, dir + "/img", dir + "/lab2", dir + "/o.h5"}, MPI_COMM_SELF); });
  };
  CHECK_THAT(prepare(dir + "/img", dir + "/lab3"), Catch::Contains("lab3") && Catch::Contains("one label per image"));
  CHECK_THAT(prepare(dir + "/text", dir + "/lab2"), Catch::Contains("not an IDX file"));
  CHECK_THAT(prepare(dir + "/missing", dir + "/lab2"), Catch::Contains("cannot open") && Catch::Contains("missing"));
  CHECK_FALSE(std::filesystem::exists(dir + "/o.h5"));
  CHECK_THAT(error_of([&] { load_images(dir + "/none.h5", MPI_COMM_SELF, "HINT"); }),
             Catch::Contains("none.h5") && Catch::Contains("HINT"));
  const auto tokens = test::make_corpus(dir, 1000);  // a token corpus is not an image set
  CHECK_THAT(error_of([&] { load_images(tokens, MPI_COMM_SELF, ""); }), Catch::Contains("classes"));
}
