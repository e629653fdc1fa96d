// The logits of a gridtrain checkpoint's language model on given token ids, for the comparison
// with transformers (hf_check.py): ids (B, T) int64 from a raw little-endian file, logits
// (B, T, V) fp32 written raw; for a mixture of experts also its balancing losses on those ids
// ("router aux_loss A z_loss Z"). One rank.
// Usage: lm_logits CKPT IDS.bin B T OUT.bin
#include <cstdio>
#include <fstream>
#include <string>

#include <mpi.h>
#include <torch/torch.h>

#include "gridtrain/app/generate.hpp"
#include "gridtrain/data/tokenizer.hpp"
#include "gridtrain/model/language_model.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: lm_logits CKPT IDS.bin B T OUT.bin\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  const std::int64_t B = std::stoll(argv[3]), T = std::stoll(argv[4]);
  auto ids = torch::empty({B, T}, torch::kInt64);
  std::ifstream(argv[2], std::ios::binary).read(reinterpret_cast<char*>(ids.data_ptr()), static_cast<std::streamsize>(ids.nbytes()));
  auto model = gridtrain::load_language_model(argv[1]).model;
  torch::NoGradGuard no_grad;
  const auto logits = model->logits(ids).contiguous();
  std::ofstream(argv[5], std::ios::binary)
      .write(reinterpret_cast<const char*>(logits.data_ptr()), static_cast<std::streamsize>(logits.nbytes()));
  const auto& routers = dynamic_cast<const gridtrain::LanguageModel&>(*model).routers();
  if (routers.enabled())
    std::printf("router aux_loss %.9g z_loss %.9g\n", routers.aux_loss().item<double>(), routers.z_loss().item<double>());
  std::printf("logits (%lld, %lld, %lld)\n", static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(logits.size(2)));
  MPI_Finalize();
  return 0;
}
