#include "corpus.hpp"

#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>

#include "gridtrain/data/prepare.hpp"
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

PrepareOptions sharded(PrepareOptions o, std::uint64_t shard_size) {
  o.shard_size = shard_size;
  return o;
}

PrepareOptions with_val_fraction(PrepareOptions o, double val_fraction) {
  o.val_fraction = val_fraction;
  return o;
}

std::vector<std::int32_t> read_all(const TokenSplit& split) {
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
