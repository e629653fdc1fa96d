#include "corpus.hpp"

#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>

#include "gridtrain/data/prepare.hpp"
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
  prepare_text(txt, h5, 0.1);
  return h5;
}

}  // namespace gridtrain::test
