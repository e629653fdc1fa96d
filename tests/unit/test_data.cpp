#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "../support/corpus.hpp"
#include "../support/errors.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/data/text_fidelity.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/sha256.hpp"
#include "gridtrain/util/h5.hpp"

using namespace gridtrain;

namespace {
std::string load_error(const std::string& path, std::size_t min_tokens = 2) {
  return test::error_of([&] { load_tokens(path, MPI_COMM_SELF, min_tokens, "HINT"); });
}
}  // namespace

TEST_CASE("prepare round trip: bytes in, the same tokens out", "[data]") {
  const auto dir = test::temp_dir("prepare");
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  std::ofstream(dir + "/t.txt", std::ios::binary) << text;
  const auto r = prepare_text(test::with_val_fraction({dir + "/t.txt", dir + "/t.h5"}, 0.25), MPI_COMM_SELF);
  CHECK(r.source_bytes == text.size());
  CHECK(r.train_tokens + r.val_tokens == text.size());
  CHECK(r.sha256 == sha256_hex(text));
  const auto d = load_tokens(dir + "/t.h5", MPI_COMM_SELF, 2, "");
  CHECK(d.vocab_size == 256);
  CHECK(d.tokenizer == "bytes");
  std::string back;
  for (auto t : test::read_all(d.train)) back += static_cast<char>(t);
  for (auto t : test::read_all(d.val)) back += static_cast<char>(t);
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
  Sampler a(10001, 10, 7), b(10001, 10, 7), other_seed(10001, 10, 8);
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
}

TEST_CASE("sampler: every epoch is a permutation of the windows, for any window count", "[data]") {
  // Counts around powers of 4 (the Feistel domain) and 1, where the cycle walk does all the work.
  for (const std::uint64_t windows : {1, 2, 3, 4, 5, 15, 16, 17, 1000, 4095, 4097}) {
    CAPTURE(windows);
    Sampler s(windows * 8 + 1, 8, 11);
    REQUIRE(s.windows() == windows);
    for (std::uint64_t e = 0; e < 3; ++e) {
      std::set<std::uint64_t> seen;
      std::uint64_t fixed = 0;
      for (std::uint64_t i = 0; i < windows; ++i) {
        const std::uint64_t w = s.window_start(e * windows + i) / 8;
        CHECK(w < windows);
        seen.insert(w);
        fixed += w == i;
      }
      CHECK(seen.size() == windows);
      // A shuffle, not the identity: a random permutation has one fixed point on average.
      if (windows >= 1000) CHECK(fixed < 10);
    }
  }
}

TEST_CASE("a corpus cut into 3 shards reads as the same tokens in one file", "[data]") {
  const auto dir = test::temp_dir("shards");
  const auto one = test::make_corpus(dir, 20000);
  const auto shards = test::shard_corpus(one, dir + "/shards", 3);
  const auto whole = load_tokens(one, MPI_COMM_SELF, 2, "");
  for (const auto& path : {shards, shards + "/shard-*.h5"}) {
    CAPTURE(path);
    const auto cut = load_tokens(path, MPI_COMM_SELF, 2, "");
    CHECK(cut.files.size() == 3);
    CHECK(cut.vocab_size == whole.vocab_size);
    CHECK(test::read_all(cut.train) == test::read_all(whole.train));
    CHECK(test::read_all(cut.val) == test::read_all(whole.val));
    // A window across a shard boundary reads on from the next file.
    const std::uint64_t boundary = share(whole.train.size(), 0, 3).second;
    std::vector<std::int64_t> a(11), b(11);
    copy_window(cut.train, boundary - 5, 10, a.data());
    copy_window(whole.train, boundary - 5, 10, b.data());
    CHECK(a == b);
  }
  CHECK_THAT(load_error(dir + "/nothing-*.h5"), Catch::Contains("no shard files (*.h5 or Megatron *.idx) match"));
  {  // a shard with another vocabulary
    H5Id f(H5Fopen((shards + "/shard-2.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open");
    H5Adelete(f, "vocab_size");
    h5_write_attr(f, "vocab_size", 300LL);
  }
  CHECK_THAT(load_error(shards), Catch::Contains("shard-2.h5") && Catch::Contains("differ from the first shard's"));
}

TEST_CASE("prepare --shard-size writes shards that read as the one-file corpus", "[data]") {
  const auto dir = test::temp_dir("prepare-shards");
  test::make_corpus(dir, 10000);  // dir/corpus.txt and its one-file preparation
  const auto one = load_tokens(dir + "/corpus.h5", MPI_COMM_SELF, 2, "");
  const auto r = prepare_text(test::sharded({dir + "/corpus.txt", dir + "/shards"}, 3000), MPI_COMM_SELF);
  CHECK(r.shards == 4);
  const auto cut = load_tokens(dir + "/shards", MPI_COMM_SELF, 2, "");
  REQUIRE(cut.files.size() == 4);
  CHECK(cut.files[3] == dir + "/shards/" + shard_name(3));
  CHECK(test::read_all(cut.train) == test::read_all(one.train));
  CHECK(test::read_all(cut.val) == test::read_all(one.val));
  CHECK(one.sha256 == sha256_hex(std::string(std::istreambuf_iterator<char>(std::ifstream(dir + "/corpus.txt").rdbuf()), {})));
  CHECK(cut.sha256 == r.sha256);
  CHECK(cut.sha256 != one.sha256);  // the corpus id of shards: the digest of theirs
  std::filesystem::remove(dir + "/shards/" + shard_name(2));
  CHECK_THAT(load_error(dir + "/shards"), Catch::Contains("is shard 3 of 4 where shard 2 of 4 belongs"));
  std::filesystem::remove(dir + "/shards/" + shard_name(3));  // the first two of four: none out of place
  CHECK_THAT(load_error(dir + "/shards"), Catch::Contains("2 shard files, but `gridtrain prepare` wrote the corpus as 4"));
  CHECK(load_error(dir + "/shards/" + shard_name(0)).empty());  // one shard named on its own is a corpus
}

TEST_CASE("prepare --train-tokenizer: SentencePiece tokens that decode back to the input", "[data]") {
  const auto dir = test::temp_dir("prepare-sp");
  test::make_corpus(dir, 20000);
  auto o = test::with_val_fraction({dir + "/corpus.txt", dir + "/sp.h5"}, 0.2);
  o.tokenizer = "sentencepiece";
  o.vocab_size = 300;  // 256 byte pieces and 3 specials included (the 12-word corpus allows 302)
  const auto r = prepare_text(o, MPI_COMM_SELF);
  CHECK(r.tokenizer == "sentencepiece");
  CHECK(r.vocab_size == 300);
  const auto d = load_tokens(dir + "/sp.h5", MPI_COMM_SELF, 2, "");
  CHECK(d.vocab_size == 300);
  CHECK(d.tokenizer == "sentencepiece");
  REQUIRE_FALSE(d.tokenizer_model.empty());
  CHECK(d.train.size() + d.val.size() < 20000 / 2);  // pieces are longer than bytes
  const auto tok = make_tokenizer(d.tokenizer, d.tokenizer_model);
  auto ids = test::read_all(d.train);
  const auto val = test::read_all(d.val);
  ids.insert(ids.end(), val.begin(), val.end());
  std::ifstream in(dir + "/corpus.txt", std::ios::binary);
  CHECK(tok->decode(ids) == std::string(std::istreambuf_iterator<char>(in), {}));
  CHECK_THROWS_WITH(make_tokenizer("sentencepiece", "not a model"), Catch::Contains("cannot load the tokenizer model"));
  CHECK_THROWS_WITH(make_tokenizer("wordpiece"), Catch::Contains("known: bytes, sentencepiece"));
}

TEST_CASE("find_unrepresentable counts bytes that are not UTF-8 and U+2581, with the first offsets", "[data]") {
  const auto u = find_unrepresentable("ok \xF0\x9F\x98\x80 \xC0\x80 \xED\xA0\x80 \xF4\x90\x80\x80 \xE2\x96\x81\xE2\x96\x81 \xE2\x82", 100);
  CHECK(u.invalid_bytes == 2 + 3 + 4 + 2);  // overlong; surrogate; past U+10FFFF; cut off at the end
  CHECK(u.first_invalid == 100 + 8);
  CHECK(u.meta_symbols == 2);
  CHECK(u.first_meta == 100 + 20);
  const auto clean = find_unrepresentable("caf\xC3\xA9 \xE2\x82\xAC\n", 0);  // é, €
  CHECK_FALSE(clean.any());
  CHECK(clean.first_invalid == Unrepresentable::kNone);
}

TEST_CASE("prepare --train-tokenizer refuses text SentencePiece does not give back, unless accepted", "[data]") {
  const auto dir = test::temp_dir("prepare-sp-lossy");
  test::make_corpus(dir, 20000);
  {
    std::ofstream out(dir + "/corpus.txt", std::ios::app | std::ios::binary);
    out << "caf\xE9 \xE9\n\xE2\x96\x81 marks a space\n";  // Latin-1 é twice, then U+2581
  }
  auto o = test::with_val_fraction({dir + "/corpus.txt", dir + "/sp.h5"}, 0.2);
  o.tokenizer = "sentencepiece";
  o.vocab_size = 300;
  const auto text = std::string(std::istreambuf_iterator<char>(std::ifstream(dir + "/corpus.txt").rdbuf()), {});
  const auto at = std::to_string(text.find('\xE9')), line = std::to_string(std::count(text.begin(), text.end(), '\n') - 1);
  CHECK_THROWS_WITH(prepare_text(o, MPI_COMM_SELF),
                    Catch::Contains("2 byte(s) that are not UTF-8 (the first at byte " + at + ", line " + line) &&
                        Catch::Contains("1 '\u2581' (U+2581") && Catch::Contains("--accept-lossy"));
  CHECK_FALSE(std::filesystem::exists(dir + "/sp.h5"));
  o.accept_lossy = true;
  const auto r = prepare_text(o, MPI_COMM_SELF);
  CHECK_THAT(r.lossy, Catch::Contains("2 byte(s) that are not UTF-8"));
  const auto d = load_tokens(dir + "/sp.h5", MPI_COMM_SELF, 2, "");
  auto ids = test::read_all(d.train);
  const auto val = test::read_all(d.val);
  ids.insert(ids.end(), val.begin(), val.end());
  CHECK(make_tokenizer(d.tokenizer, d.tokenizer_model)->decode(ids) != text);  // what the refusal was for
  o.accept_lossy = false;
  test::make_corpus(dir, 20000);
  o.character_coverage = 0;
  CHECK_THROWS_WITH(prepare_text(o, MPI_COMM_SELF), Catch::Contains("--character-coverage 0") && Catch::Contains("valid: 0 < F <= 1"));
  o.character_coverage = 0.9995;
  o.vocab_size = 262;  // below the 259 byte and control pieces plus one per character
  CHECK_THROWS_WITH(prepare_text(o, MPI_COMM_SELF), Catch::Contains("--vocab-size 262 is too small") &&
                                                        Catch::Contains("needs at least ") &&
                                                        Catch::Contains("--character-coverage 0.9995"));
}

TEST_CASE("a chunked token dataset is refused with what to do", "[data]") {
  const auto dir = test::temp_dir("chunked");
  const auto path = dir + "/chunked.h5";
  {
    H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create");
    const hsize_t n = 100, chunk = 10;
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), "dcpl");
    H5Pset_chunk(dcpl, 1, &chunk);
    for (const char* group : {"/train", "/val"}) {
      H5Id g(H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group");
      H5Id space(H5Screate_simple(1, &n, nullptr), "space");
      H5Id ds(H5Dcreate2(g, "tokens", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "dataset");
      const std::vector<std::uint8_t> zeros(n);
      H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
    }
    h5_write_attr(file, "vocab_size", 256LL);
    h5_write_attr(file, "tokenizer", std::string("bytes"));
  }
  CHECK_THAT(load_error(path), Catch::Contains("/train/tokens is chunked") && Catch::Contains("gridtrain prepare"));
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
