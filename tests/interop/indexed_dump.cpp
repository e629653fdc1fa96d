// Megatron indexed datasets as gridtrain reads them, as JSON for tests/interop/megatron_indexed.py
// to compare with megatron-core's IndexedDataset: the training and validation streams of
// load_tokens(PATH, {SPLIT, VOCAB}), and each PREFIX's documents (IndexedDataset::document_starts).
// Usage: indexed_dump PATH SPLIT VOCAB [PREFIX...]   ("-" as SPLIT: data.split unset)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>

#include <nlohmann/json.hpp>

#include "gridtrain/data/indexed_dataset.hpp"
#include "gridtrain/data/token_data.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;

namespace {

std::vector<std::int32_t> all_of(const StoredIntegers& s) {
  std::vector<std::int32_t> out(s.size());
  s.read(0, out.size(), out.data());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: indexed_dump PATH SPLIT VOCAB [PREFIX...]\n");
    return 2;
  }
  int rc = 0;
  try {
    const std::string split = argv[2] == std::string("-") ? "" : argv[2];
    const auto data = load_tokens(argv[1], MPI_COMM_SELF, 2, "", {split, std::atoi(argv[3])});
    nlohmann::json out = {{"train", all_of(data.train)}, {"val", all_of(data.val)}, {"documents", nlohmann::json::object()}};
    for (int i = 4; i < argc; ++i) {
      const auto set = IndexedDataset::open(argv[i]);
      std::vector<std::uint64_t> every(set.documents + 1);
      std::iota(every.begin(), every.end(), 0);
      const auto starts = set.document_starts(every);
      auto& docs = out["documents"][argv[i]] = nlohmann::json::array();
      for (std::uint64_t d = 0; d < set.documents; ++d) docs.push_back(all_of(StoredIntegers({set.tokens(starts[d], starts[d + 1])})));
    }
    std::printf("%s\n", out.dump().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
