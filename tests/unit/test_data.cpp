#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "../support/corpus.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

using namespace gridtrain;

namespace {
std::string load_error(const std::string& path, std::size_t min_tokens = 2) {
  try {
    load_tokens(path, MPI_COMM_SELF, min_tokens, "HINT");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("prepare round trip: bytes in, the same tokens out", "[data]") {
  const auto dir = test::temp_dir("prepare");
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  std::ofstream(dir + "/t.txt", std::ios::binary) << text;
  const auto r = prepare_text(dir + "/t.txt", dir + "/t.h5", 0.25);
  CHECK(r.source_bytes == text.size());
  CHECK(r.train_tokens + r.val_tokens == text.size());
  CHECK(r.sha256 == sha256_hex(text));
  const auto d = load_tokens(dir + "/t.h5", MPI_COMM_SELF, 2, "");
  CHECK(d.vocab_size == 256);
  CHECK(d.tokenizer == "bytes");
  std::string back;
  for (auto t : d.train) back += static_cast<char>(t);
  for (auto t : d.val) back += static_cast<char>(t);
  CHECK(back == text);
  CHECK_FALSE(std::filesystem::exists(dir + "/t.h5.tmp"));
}

TEST_CASE("bad data files give clear errors", "[data]") {
  const auto dir = test::temp_dir("baddata");
  CHECK_THAT(load_error(dir + "/missing.h5"), Catch::Contains("file not found") && Catch::Contains("HINT"));
  std::ofstream(dir + "/junk.h5") << "not hdf5 at all";
  CHECK_THAT(load_error(dir + "/junk.h5"), Catch::Contains("not an HDF5 file"));
  {
    H5Id f(H5Fcreate((dir + "/empty.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create");
  }
  CHECK_THAT(load_error(dir + "/empty.h5"), Catch::Contains("vocab_size") && Catch::Contains("expected the layout"));
  const auto good = test::make_corpus(dir, 4000);
  CHECK(load_error(good).empty());
  CHECK_THAT(load_error(good, 100000), Catch::Contains("tokens; at least 100000"));
  // Shrink the declared vocabulary below the bytes present.
  {
    H5Id f(H5Fopen(good.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open");
    H5Adelete(f, "vocab_size");
    h5_write_attr(f, "vocab_size", 50LL);
  }
  CHECK_THAT(load_error(good), Catch::Contains("outside [0, vocab_size = 50)"));
}

TEST_CASE("sampler: the batch of a step depends on (seed, step) only; dp slices differ", "[data]") {
  std::vector<std::int32_t> tokens(10001);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i % 256);
  Sampler a(tokens, 10, 7), b(tokens, 10, 7), other_seed(tokens, 10, 8);
  CHECK(a.windows() == 1000);
  // Visit in a different order: same answers (no hidden stream state).
  std::vector<std::uint64_t> forward, backward(3000);
  for (std::uint64_t g = 0; g < 3000; ++g) forward.push_back(a.window_start(g));
  for (std::uint64_t g = 3000; g-- > 0;) backward[g] = b.window_start(g);
  CHECK(forward == backward);
  // Each epoch is a permutation of all windows; epochs differ; seeds differ.
  std::set<std::uint64_t> epoch0(forward.begin(), forward.begin() + 1000);
  CHECK(epoch0.size() == 1000);
  CHECK(std::vector<std::uint64_t>(forward.begin(), forward.begin() + 1000) !=
        std::vector<std::uint64_t>(forward.begin() + 1000, forward.begin() + 2000));
  CHECK(other_seed.window_start(0) != a.window_start(0));
  // Two dp ranks of a global batch of 8 read disjoint windows.
  std::set<std::uint64_t> r0, r1;
  for (int j = 0; j < 4; ++j) r0.insert(a.window_start(8 * 5 + j)), r1.insert(a.window_start(8 * 5 + 4 + j));
  for (auto w : r0) CHECK(r1.count(w) == 0);
  std::vector<std::int64_t> window(11);
  a.fill(0, window.data());
  for (int t = 0; t < 11; ++t) CHECK(window[t] == tokens[a.window_start(0) + t]);
}

TEST_CASE("share splits n items contiguously and evenly", "[data]") {
  CHECK(share(10, 0, 4) == std::pair<std::size_t, std::size_t>{0, 3});
  CHECK(share(10, 1, 4) == std::pair<std::size_t, std::size_t>{3, 6});
  CHECK(share(10, 3, 4) == std::pair<std::size_t, std::size_t>{8, 10});
  const auto v = validation_starts(1000, 9, 5);
  CHECK(v.front() == 0);
  CHECK(v.back() == 990);
}

TEST_CASE("validation_starts asks for no more windows than the split has", "[data]") {
  // 100 tokens, T = 9: (100 - 1) / 9 = 11 disjoint windows of 10 tokens at stride 9.
  const auto all = validation_starts(100, 9, 1000);
  REQUIRE(all.size() == 11);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == 9 * i);
  CHECK(all.back() + 10 <= 100);
  CHECK(validation_starts(100, 9, 11) == all);
  CHECK(validation_starts(100, 9, 4).size() == 4);
}
