// Context parallelism (grid.cp = the world size) against whole sequences on the same ranks, side by
// side: each rank's peak activation memory during forward + backward (a counting CPU allocator:
// the bytes LibTorch holds above what the parameters and gradients held before) against the
// accountant's figure (ModelPlan::activation_bytes), the step time (the slowest rank's, median of
// alternating rounds), and the bytes each rank sent over cp against ModelPlan::context_bytes.
//
//   mpiexec -n CP bench_context_parallel TYPE N_LAYER T C HEADS B ROUNDS
//
// TYPE gpt | llama; sdpa attention, vocabulary 256 (bytes), fp32, the same B windows on every
// rank. Modes: "cp 1, B windows" (rank 0 alone: the memory cp divides), "dp, none" and "dp, full"
// (every rank B/cp whole windows, without and with full recomputation: the same tokens per rank
// as cp, Megatron's comparison of context parallelism with recomputation), "cp ring" and
// "cp allgather" (B windows, each rank its T/cp tokens of each). B must be a multiple of cp.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench_mpi.hpp"
#include "counting_allocator.hpp"
#include "gridtrain/comm/axis.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/model/layout.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/parallel/context_parallel.hpp"

using namespace gridtrain;
using gridtrain::bench::CountingAllocator;
using gridtrain::bench::max_over_ranks;
using gridtrain::bench::median;

namespace {

struct Mode {
  const char* name;
  bool everyone, context;  // every rank runs it; its sequences split over cp
  Recompute recompute = Recompute::None;
  ContextExchange exchange = ContextExchange::Ring;
  std::shared_ptr<Model> model = {};
  torch::Tensor ids = {}, targets = {};
  double accountant = 0, measured = 0, sent = 0, formula = 0;  // bytes: the rank that holds the most; per step
  std::vector<double> seconds = {};
};

}  // namespace

int main(int argc, char** argv) {
  const auto world = bench::start(argc, argv, 8, "mpiexec -n CP bench_context_parallel TYPE N_LAYER T C HEADS B ROUNDS");
  if (!world.ok) return 2;
  CountingAllocator& counting = bench::counting_cpu_allocator();
  {
    const int B = std::atoi(argv[6]), rounds = std::atoi(argv[7]), n = world.size, T = std::atoi(argv[3]);
    Axis cp("cp", MPI_COMM_WORLD);
    const DataShape data{256};
    torch::manual_seed(1);  // the same windows on every rank
    const auto idx = torch::randint(256, {B, T}, torch::kLong), targets = torch::randint(256, {B, T}, torch::kLong);
    std::vector<Mode> modes = {{"cp 1, B windows", false, false},
                               {"dp, none", true, false},
                               {"dp, full", true, false, Recompute::Full},
                               {"cp ring", true, true},
                               {"cp allgather", true, true, Recompute::None, ContextExchange::Allgather}};
    for (auto& m : modes) {
      if (!m.everyone && world.rank != 0) continue;
      Config c = parse_config("", "bench", {std::string("--model.type=") + argv[1], std::string("--model.n_layer=") + argv[2],
                                            std::string("--model.block_size=") + argv[3],
                                            std::string("--model.n_embd=") + argv[4],
                                            std::string("--model.n_head=") + argv[5], "--model.attention=sdpa"});
      c.train.recompute = m.recompute;
      ModelLayout layout;
      if (m.context) layout.cp = &cp, layout.cp_comm = m.exchange;
      const int rows = m.everyone && !m.context ? B / n : B;  // dp: this rank's share of the windows
      const auto mine = [&](const torch::Tensor& t) {
        return m.context ? CpRegion{&cp, m.exchange}.local(t) : t.narrow(0, m.everyone ? world.rank * rows : 0, rows);
      };
      m.ids = mine(idx), m.targets = mine(targets);
      m.model = make_model(c, data, layout);
      m.model->initialize(1);
      const auto plan = plan_model(c, data, layout);
      m.accountant = plan->activation_bytes(rows, 4, 1);
      const auto [forward, backward] = plan->context_bytes(rows, 4);
      m.formula = (forward + backward) * std::atoi(argv[2]);
      m.model->loss(m.ids, m.targets).backward();  // warm-up: every .grad exists from here on
    }
    for (int r = 0; r < rounds; ++r)
      for (auto& m : modes) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (!m.model) continue;
        const auto sent = cp.bytes_sent();
        const auto run = bench::measure(counting, [&] { m.model->loss(m.ids, m.targets).backward(); });
        m.seconds.push_back(m.everyone ? max_over_ranks(run.seconds) : run.seconds);
        m.measured = std::max(m.measured, run.peak_bytes);
        m.sent = static_cast<double>(cp.bytes_sent() - sent);
      }
    for (auto& m : modes)
      if (m.everyone) m.measured = max_over_ranks(m.measured), m.accountant = max_over_ranks(m.accountant);
    if (world.rank == 0) {
      const double mib = 1024.0 * 1024.0, whole = modes[0].measured, dp_none = median(modes[1].seconds);
      std::printf("%s, sdpa attention, n_layer %s, T %d, C %s, %s heads, %d windows, fp32, cp %d, %d threads, %d rounds\n",
                  argv[1], argv[2], T, argv[4], argv[5], B, n, torch::get_num_threads(), rounds);
      std::printf("%-16s %15s %13s %10s %12s %13s %12s %12s\n", "mode", "accountant MiB", "measured MiB", "meas/acct",
                  "meas/cp 1", "time/dp none", "cp sent MiB", "formula MiB");
      for (const auto& m : modes)
        std::printf("%-16s %15.1f %13.1f %10.3f %12.3f %13.3f %12.3f %12.3f\n", m.name, m.accountant / mib,
                    m.measured / mib, m.measured / m.accountant, m.measured / whole,
                    m.everyone ? median(m.seconds) / dp_none : 0.0, m.sent / mib, m.formula / mib);
    }
  }
  MPI_Finalize();
  return 0;
}
