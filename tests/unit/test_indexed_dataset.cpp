// Megatron indexed datasets (data/indexed_dataset.hpp): written, read back through load_tokens,
// split by documents, and every malformed index refused by file and offset. megatron-core's own
// reader and writer are the independent check (tests/interop/megatron_indexed.py).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "../support/corpus.hpp"
#include "../support/errors.hpp"
#include "gridtrain/data/indexed_dataset.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;

namespace {

// Documents 0 .. n-1, document d of d + 3 tokens (t + d) % vocab, written at prefix.
std::vector<std::vector<std::int32_t>> write_documents(const std::string& prefix, int n, long long vocab) {
  std::vector<std::vector<std::int32_t>> docs;
  IndexedWriter w(prefix, vocab);
  for (int d = 0; d < n; ++d) {
    std::vector<std::int32_t> t(static_cast<std::size_t>(d) + 3);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((static_cast<long long>(i) * 7 + d) % vocab);
    w.add_document(t);
    docs.push_back(std::move(t));
  }
  w.finish();
  return docs;
}

std::vector<std::int32_t> concat(const std::vector<std::vector<std::int32_t>>& docs, std::size_t begin, std::size_t end) {
  std::vector<std::int32_t> out;
  for (std::size_t d = begin; d < end; ++d) out.insert(out.end(), docs[d].begin(), docs[d].end());
  return out;
}

// Overwrites bytes of a file at offset.
template <class T>
void poke(const std::string& file, std::uint64_t offset, T value) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

std::string load_error(const std::string& path, int vocab = 300, const std::string& split = "3,1") {
  return test::error_of([&] { load_tokens(path, MPI_COMM_SELF, 2, "HINT", {split, vocab}); });
}

}  // namespace

TEST_CASE("split_ranges follows Megatron's bookends and rounds half to even", "[indexed]") {
  // 969,30,1 of 1000 documents: exactly 969 / 30 / 1.
  auto r = split_ranges("969,30,1", 1000);
  CHECK(r[0] == std::pair<std::uint64_t, std::uint64_t>{0, 969});
  CHECK(r[1] == std::pair<std::uint64_t, std::uint64_t>{969, 999});
  CHECK(r[2] == std::pair<std::uint64_t, std::uint64_t>{999, 1000});
  // 1,1 of 3: the bookend 1.5 rounds to 2 (half to even), as Python's round(); test empty.
  r = split_ranges("1,1", 3);
  CHECK(r[0].second == 2);
  CHECK(r[1] == std::pair<std::uint64_t, std::uint64_t>{2, 3});
  CHECK(r[2].first == r[2].second);
  // 1,1 of 5: 2.5 rounds to 2.
  CHECK(split_ranges("1,1", 5)[0].second == 2);
  // Whatever the weights, the ranges tile [0, D].
  for (const char* s : {"7,2,1", "0.9,0.1", "1", "3,0,5"})
    for (std::uint64_t D : {0, 1, 2, 17, 1001}) {
      r = split_ranges(s, D);
      CHECK(r[0].first == 0);
      CHECK(r[0].second == r[1].first);
      CHECK(r[1].second == r[2].first);
      CHECK(r[2].second == D);
    }
  for (const char* bad : {"", "a", "1,,1", "-1,2", "0,0", "1,1,1,1"})
    CHECK_THROWS_WITH(split_ranges(bad, 10), Catch::Contains("data.split = '" + std::string(bad) + "'"));
}

TEST_CASE("a Megatron dataset reads back as its documents, split by documents", "[indexed]") {
  const auto dir = test::temp_dir("indexed");
  for (long long vocab : {300LL, 70000LL}) {  // uint16, int32
    const std::string prefix = dir + "/corpus" + std::to_string(vocab);
    const auto docs = write_documents(prefix, 40, vocab);
    CHECK_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
    const auto set = IndexedDataset::open(prefix);
    CHECK(set.dtype_code == (vocab < 65500 ? 8 : 4));
    CHECK(set.sequences == 40);
    CHECK(set.documents == 40);
    // Each document's tokens where document_starts puts them.
    std::vector<std::uint64_t> all(41);
    std::iota(all.begin(), all.end(), 0);
    const auto starts = set.document_starts(all);
    for (std::size_t d = 0; d < docs.size(); ++d) {
      const StoredIntegers one({set.tokens(starts[d], starts[d + 1])});
      CHECK(test::read_all(one) == docs[d]);
    }
    // Split 3,1: documents [0, 30) train, [30, 40) validation.
    const auto data = load_tokens(prefix, MPI_COMM_SELF, 2, "", {"3,1", static_cast<int>(vocab)});
    CHECK(data.format == "megatron");
    CHECK(data.tokenizer == "none");
    CHECK(test::read_all(data.train) == concat(docs, 0, 30));
    CHECK(test::read_all(data.val) == concat(docs, 30, 40));
  }
}

TEST_CASE("Megatron shards in a directory read as one corpus, split over all documents", "[indexed]") {
  const auto dir = test::temp_dir("indexed_shards");
  std::filesystem::create_directories(dir + "/shards");
  const auto one = write_documents(dir + "/one", 30, 300);
  // The same 30 documents as 3 shards of 10.
  for (int k = 0; k < 3; ++k) {
    IndexedWriter w(dir + "/shards/part" + std::to_string(k), 300);
    for (int d = 10 * k; d < 10 * (k + 1); ++d) w.add_document(one[static_cast<std::size_t>(d)]);
    w.finish();
  }
  // One kind per directory: HDF5 shards beside the indexes are refused, not silently ignored.
  std::filesystem::copy_file(test::make_corpus(dir, 4000), dir + "/shards/extra.h5");
  CHECK_THAT(load_error(dir + "/shards"), Catch::Contains("holds both HDF5 shards"));
  std::filesystem::remove(dir + "/shards/extra.h5");
  for (const char* split : {"2,1", "969,30,1", "1,4"}) {
    const auto whole = load_tokens(dir + "/one", MPI_COMM_SELF, 2, "", {split, 300});
    const auto cut = load_tokens(dir + "/shards", MPI_COMM_SELF, 2, "", {split, 300});
    CHECK(test::read_all(cut.train) == test::read_all(whole.train));
    CHECK(test::read_all(cut.val) == test::read_all(whole.val));
    CHECK(cut.files.size() == 3);
  }
}

TEST_CASE("malformed Megatron datasets are refused by file and offset", "[indexed]") {
  const auto dir = test::temp_dir("indexed_bad");
  auto fresh = [&](const std::string& name) {
    const std::string p = dir + "/" + name;
    write_documents(p, 12, 300);
    return p;
  };
  const std::uint64_t S = 12, lengths_at = 34, pointers_at = lengths_at + 4 * S, documents_at = pointers_at + 8 * S;
  CHECK(load_error(fresh("good")).empty());
  CHECK_THAT(load_error(dir + "/absent"), Catch::Contains("file not found (nor a Megatron dataset") && Catch::Contains("HINT"));
  {
    const auto p = fresh("magic");
    poke<char>(p + ".idx", 0, 'X');
    CHECK_THAT(load_error(p), Catch::Contains(p + ".idx: offset 0") && Catch::Contains("MMIDIDX"));
  }
  {
    const auto p = fresh("version");
    poke<std::uint64_t>(p + ".idx", 9, 2);
    CHECK_THAT(load_error(p), Catch::Contains("offset 9: version 2; valid: 1"));
  }
  for (const auto& [code, what] : std::vector<std::pair<int, std::string>>{{7, "(float32) is not an integer"}, {6, "(float64)"}, {9, "is unknown"}}) {
    const auto p = fresh("dtype" + std::to_string(code));
    poke<std::uint8_t>(p + ".idx", 17, static_cast<std::uint8_t>(code));
    CHECK_THAT(load_error(p), Catch::Contains("offset 17: dtype code " + std::to_string(code)) && Catch::Contains(what));
  }
  {
    const auto p = fresh("short_bin");
    std::filesystem::resize_file(p + ".bin", std::filesystem::file_size(p + ".bin") - 2);
    CHECK_THAT(load_error(p), Catch::Contains(p + ".bin") && Catch::Contains("truncated"));
  }
  {
    const auto p = fresh("pointer");
    poke<std::int64_t>(p + ".idx", pointers_at + 8 * 5, 0);  // sequence 5 points back to the start
    CHECK_THAT(load_error(p), Catch::Contains("offset " + std::to_string(pointers_at + 8 * 5)) &&
                                  Catch::Contains("sequence 5's pointer is 0") && Catch::Contains("increase"));
  }
  {
    const auto p = fresh("length");
    poke<std::int32_t>(p + ".idx", lengths_at + 4 * 3, -4);
    CHECK_THAT(load_error(p), Catch::Contains("sequence 3 has length -4"));
  }
  {
    const auto p = fresh("last_document");
    poke<std::int64_t>(p + ".idx", documents_at + 8 * S, static_cast<std::int64_t>(S - 1));
    CHECK_THAT(load_error(p), Catch::Contains("offset " + std::to_string(documents_at + 8 * S)) &&
                                  Catch::Contains("the last must be the sequence count S = 12"));
  }
  {
    const auto p = fresh("decreasing");
    poke<std::int64_t>(p + ".idx", documents_at + 8 * 6, 2);
    CHECK_THAT(load_error(p), Catch::Contains("document index 6 = 2") && Catch::Contains("must not decrease"));
  }
  {
    const std::string p = dir + "/empty";
    IndexedWriter(p, 300).finish();
    CHECK_THAT(load_error(p), Catch::Contains("holds no documents"));
  }
  {
    const auto p = fresh("size");
    std::ofstream(p + ".idx", std::ios::app) << "x";
    CHECK_THAT(load_error(p), Catch::Contains("bytes, but S = 12 sequences"));
  }
  // Tokens against the model's vocabulary, which the index does not record.
  const auto good = dir + "/good";
  CHECK_THAT(load_error(good, 10), Catch::Contains("outside [0, model.vocab_size = 10)"));
  CHECK_THAT(load_error(good, 0), Catch::Contains("does not record its vocabulary; set model.vocab_size"));
  CHECK_THAT(load_error(good, 300, "1,0,1"), Catch::Contains("leaves no validation document"));
  CHECK_THAT(test::error_of([&] { corpus_vocab_size(good, MPI_COMM_SELF, "", "3,1"); }), Catch::Contains("set model.vocab_size"));
  // 12 documents at Megatron's 969,30,1: round(0.969 · 12) = 12 leaves none to validate on.
  CHECK_THAT(load_error(good, 300, ""), Catch::Contains("'969,30,1' leaves no validation document of 12"));
  // data.split is for Megatron datasets: an HDF5 corpus carries its own split.
  CHECK_THAT(load_error(test::make_corpus(dir, 4000), 0, "9,1"), Catch::Contains("leave data.split = auto"));
}
