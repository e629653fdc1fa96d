// gridtrain's own CPU kernels against ATen's on this CPU, side by side in one run (G20: does each
// still win where MKL and ATen run AVX-512?): the fused GELU (model/gelu) against
// torch::gelu(x, "tanh"), forward + backward; oneDNN's matmul for the linear layers
// (model.matmul = onednn) against ATen's linear (MKL's sgemm: model.matmul = blas), forward +
// backward (dX = dY W, dW = dYᵀ X). The shapes are the main deck's GPT (C = 128, 4C = 512) at
// micro-batch 16 × T 128 = M 2048 tokens. Each kernel pair runs ROUNDS times, alternating which
// goes first; printed: milliseconds per call of each and gridtrain / ATen time (< 1: ours faster).
// Usage: bench_cpu_kernels [ROUNDS] [REPEATS]   (default 7 rounds of 20 calls; 1 thread)
//   e.g. ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 bench_cpu_kernels   (a CPU without AVX-512)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "gridtrain/model/gelu.hpp"
#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/timer.hpp"

using namespace gridtrain;

namespace {

constexpr std::int64_t kTokens = 2048;

// Milliseconds per call of fn over `repeats` calls.
double time_ms(const std::function<void()>& fn, int repeats) {
  fn();  // warm: first-call allocation, oneDNN's primitive cache
  const Stopwatch clock;
  for (int i = 0; i < repeats; ++i) fn();
  return 1e3 * clock.seconds() / repeats;
}

// A kernel's forward and backward on x: y = f(x), then y.backward(dy).
std::function<void()> fwd_bwd(const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& x,
                              const torch::Tensor& dy) {
  return [=] {
    const auto leaf = x.detach().requires_grad_(true);
    f(leaf).backward(dy);
  };
}

struct Pair {
  std::string name;
  std::function<void()> ours, aten;
  Matmul ours_matmul = Matmul::Blas, aten_matmul = Matmul::Blas;  // the library each side runs on
};

void compare(const Pair& p, int rounds, int repeats) {
  std::vector<double> ours, aten, ratio;
  for (int r = 0; r < rounds; ++r) {
    auto run = [&](bool mine) {
      set_matmul_backend(mine ? p.ours_matmul : p.aten_matmul);
      return time_ms(mine ? p.ours : p.aten, repeats);
    };
    const bool ours_first = r % 2 == 0;
    const double a = run(ours_first), b = run(!ours_first);
    ours.push_back(ours_first ? a : b);
    aten.push_back(ours_first ? b : a);
    ratio.push_back(ours.back() / aten.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%-34s  gridtrain %7.3f ms  ATen %7.3f ms  ratio %.3f (rounds %.3f .. %.3f)\n", p.name.c_str(),
              median(ours), median(aten), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7, repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  at::set_num_threads(1);
  torch::manual_seed(0);
  std::printf("1 thread, M = %lld tokens; oneDNN's matmul %s; fused GELU %s\n", static_cast<long long>(kTokens),
              onednn_unavailable().empty() ? "runs here" : ("unavailable: " + onednn_unavailable()).c_str(),
              fused_gelu_available() ? "available" : "unavailable (ATen's runs on both sides)");
  const auto h = torch::randn({kTokens, 512});  // (M, 4C): c_fc's output
  std::vector<Pair> pairs = {
      {"GELU (M, 4C = 512)", fwd_bwd(gelu_tanh, h, torch::randn_like(h)),
       fwd_bwd([](const torch::Tensor& x) { return torch::gelu(x, "tanh"); }, h, torch::randn_like(h))}};
  if (onednn_unavailable().empty())
    for (auto [k, n, name] : std::vector<std::tuple<int, int, const char*>>{
             {128, 384, "c_attn"}, {128, 512, "c_fc"}, {512, 128, "mlp c_proj"}, {128, 256, "head"}}) {
      const auto x = torch::randn({kTokens, k}), w = torch::randn({n, k}) * 0.02, b = torch::zeros({n});
      const auto dy = torch::randn({kTokens, n});
      auto linear = [w, b](const torch::Tensor& in) {
        return dense(in, w.detach().requires_grad_(true), b.detach().requires_grad_(true));
      };
      const std::string label = std::string("linear ") + name + " (K " + std::to_string(k) + ", N " + std::to_string(n) + ")";
      pairs.push_back({label, fwd_bwd(linear, x, dy), fwd_bwd(linear, x, dy), Matmul::OneDnn, Matmul::Blas});
    }
  for (const auto& p : pairs) compare(p, rounds, repeats);
  return 0;
}
