#include "corpus.hpp"

#include <unistd.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <fstream>

#include "gridtrain/data/prepare.hpp"
#include "gridtrain/data/prepare_idx.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/hash.hpp"

namespace gridtrain::test {

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("gridtrain-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string make_corpus(const std::string& dir, std::size_t bytes) {
  static constexpr std::array<const char*, 12> words = {"and", "the", "lord", "said", "unto", "him",
                                                        "in",  "of",  "land", "they", "were", "light"};
  std::string text;
  std::uint64_t state = 42;
  while (text.size() < bytes) {
    state = splitmix64(state);
    text += words[state % words.size()];
    text += (state >> 32) % 9 == 0 ? ".\n" : " ";
  }
  text.resize(bytes);
  const std::string txt = dir + "/corpus.txt", h5 = dir + "/corpus.h5";
  std::ofstream(txt, std::ios::binary) << text;
  prepare_text({txt, h5}, MPI_COMM_SELF);
  return h5;
}

void write_idx(const std::string& path, const std::vector<std::uint32_t>& dims, const std::string& data, bool gz) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (const auto d : dims)
    for (int shift : {24, 16, 8, 0}) bytes += static_cast<char>((d >> shift) & 0xff);
  bytes += data;
  if (!gz) {
    std::ofstream(path, std::ios::binary) << bytes;
    return;
  }
  gzFile out = gzopen(path.c_str(), "wb");
  gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(out);
}

std::string make_images(const std::string& dir, int train, int test) {
  constexpr int kSide = 12, kClasses = 4;
  std::uint64_t state = 7;
  auto images = [&](int n, const std::string& stem, bool gz) {
    std::string pixels, labels;
    for (int i = 0; i < n; ++i) {
      state = splitmix64(state);
      const int k = static_cast<int>(state % kClasses), y0 = 1 + 6 * (k / 2), x0 = 1 + 6 * (k % 2);
      labels += static_cast<char>(k);
      for (int y = 0; y < kSide; ++y)
        for (int x = 0; x < kSide; ++x) {
          state = splitmix64(state);
          const bool block = y >= y0 && y < y0 + 3 && x >= x0 && x < x0 + 3;
          pixels += static_cast<char>((block ? 150 : 0) + state % 100);
        }
    }
    const auto N = static_cast<std::uint32_t>(n);
    write_idx(dir + "/" + stem + "-images.idx" + (gz ? ".gz" : ""), {N, kSide, kSide}, pixels, gz);
    write_idx(dir + "/" + stem + "-labels.idx", {N}, labels, false);
  };
  images(train, "train", true);
  images(test, "test", false);
  IdxOptions o{dir + "/train-images.idx.gz", dir + "/train-labels.idx", dir + "/test-images.idx",
               dir + "/test-labels.idx", dir + "/images.h5"};
  prepare_idx(o, MPI_COMM_SELF);
  return o.output;
}

PrepareOptions sharded(PrepareOptions o, std::uint64_t shard_size) {
  o.shard_size = shard_size;
  return o;
}

PrepareOptions with_val_fraction(PrepareOptions o, double val_fraction) {
  o.val_fraction = val_fraction;
  return o;
}

std::vector<std::int32_t> read_all(const StoredIntegers& split) {
  std::vector<std::int32_t> out(split.size());
  split.read(0, out.size(), out.data());
  return out;
}

std::string shard_corpus(const std::string& path, const std::string& dir, int shards) {
  const auto d = load_tokens(path, MPI_COMM_SELF, 2, "");
  const std::vector<std::int32_t> all[2] = {read_all(d.train), read_all(d.val)};
  std::filesystem::create_directories(dir);
  for (int i = 0; i < shards; ++i) {
    const auto name = dir + "/shard-" + std::to_string(i) + ".h5";
    H5Id file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create " + name);
    for (int split = 0; split < 2; ++split) {
      const auto [begin, end] = share(all[split].size(), i, shards);
      const std::vector<std::uint8_t> bytes(all[split].begin() + static_cast<std::ptrdiff_t>(begin),
                                            all[split].begin() + static_cast<std::ptrdiff_t>(end));
      const std::string group = split == 0 ? "/train" : "/val";
      H5Id g(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group");
      const hsize_t n = bytes.size();
      H5Id space(H5Screate_simple(1, &n, nullptr), "space");
      H5Id ds(H5Dcreate2(g, "tokens", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "dataset");
      H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    }
    h5_write_attr(file, "vocab_size", static_cast<long long>(d.vocab_size));
    h5_write_attr(file, "tokenizer", d.tokenizer);
  }
  return dir;
}

}  // namespace gridtrain::test
