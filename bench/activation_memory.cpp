// Activation memory and step time of train.recompute = none, selective and full, side by side:
// one rank, one model, the same ids, each mode's forward + backward measured by a counting CPU
// allocator (the bytes LibTorch holds, peak during forward + backward minus what the parameters
// and gradients held before it) against the accountant's figure (ModelPlan::activation_bytes,
// Korthikanti et al. 2022 Table 2), and timed in alternating rounds.
//
//   bench_activation_memory TYPE N_LAYER T C HEADS B ATTENTION ROUNDS
//
// TYPE gpt | llama, ATTENTION sdpa | math; vocabulary 256 (bytes), fp32. Prints one row per mode:
// accountant MiB, measured MiB, measured / accountant, measured / none's, median time / none's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/registry.hpp"
#include "counting_allocator.hpp"

using namespace gridtrain;
using gridtrain::bench::CountingAllocator;

namespace {

struct Row {
  double accountant = 0, measured = 0;
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: bench_activation_memory TYPE N_LAYER T C HEADS B ATTENTION ROUNDS\n");
    return 2;
  }
  static CountingAllocator counting(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  const int B = std::atoi(argv[6]), T = std::atoi(argv[3]), rounds = std::atoi(argv[8]);
  const DataShape data{256};
  const auto idx = torch::randint(256, {B, T}, torch::kLong), targets = torch::randint(256, {B, T}, torch::kLong);
  const std::vector<Recompute> modes = {Recompute::None, Recompute::Selective, Recompute::Full};
  std::vector<Row> rows(modes.size());
  std::vector<std::shared_ptr<Model>> models;
  for (std::size_t m = 0; m < modes.size(); ++m) {
    Config c = parse_config("", "bench", {std::string("--model.type=") + argv[1], std::string("--model.n_layer=") + argv[2],
                                          std::string("--model.block_size=") + argv[3],
                                          std::string("--model.n_embd=") + argv[4],
                                          std::string("--model.n_head=") + argv[5],
                                          std::string("--model.attention=") + argv[7]});
    c.train.recompute = modes[m];
    models.push_back(make_model(c, data));
    models.back()->initialize(1);
    rows[m].accountant = plan_model(c, data, {})->activation_bytes(B, 4, 1);
  }
  auto step = [&](Model& model) { model.loss(idx, targets).backward(); };
  for (auto& model : models) step(*model);  // warm-up: every .grad exists from here on
  for (int r = 0; r < rounds; ++r)
    for (std::size_t m = 0; m < modes.size(); ++m) {
      counting.reset();
      const auto before = counting.now();
      const auto t0 = std::chrono::steady_clock::now();
      step(*models[m]);
      rows[m].seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      rows[m].measured = std::max(rows[m].measured, static_cast<double>(counting.peak() - before));
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double mib = 1024.0 * 1024.0, none_s = median(rows[0].seconds);
  std::printf("%s, %s attention, n_layer %s, T %d, C %s, %s heads, micro-batch %d, fp32, %d threads, %d rounds\n", argv[1],
              argv[7], argv[2], T, argv[4], argv[5], B, torch::get_num_threads(), rounds);
  std::printf("%-10s %15s %13s %12s %12s %12s\n", "recompute", "accountant MiB", "measured MiB", "meas/acct",
              "meas/none", "time/none");
  for (std::size_t m = 0; m < modes.size(); ++m)
    std::printf("%-10s %15.1f %13.1f %12.3f %12.3f %12.3f\n", name_of(modes[m]), rows[m].accountant / mib,
                rows[m].measured / mib, rows[m].measured / rows[m].accountant, rows[m].measured / rows[0].measured,
                median(rows[m].seconds) / none_s);
  return 0;
}
