// gridtrain --dry-run: what a deck will cost on this launch's grid, per rank and per pipeline
// stage, without training.
#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/app/app.hpp"
#include "gridtrain/app/trainer.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

// model.vocab_size, or the prepared dataset's (an attribute; the tokens are not read).
int vocab_of(const Config& cfg) {
  if (cfg.model.vocab_size > 0) return cfg.model.vocab_size;
  h5_silence_errors();
  try {
    H5Id file(H5Fopen(cfg.data.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "cannot open it");
    return static_cast<int>(h5_read_attr_int(file, "vocab_size"));
  } catch (const std::runtime_error& e) {
    throw Error("--dry-run: " + cfg.data.path + ": " + e.what() + "; prepare the dataset, or set model.vocab_size");
  }
}

// Optimizer state bytes per parameter, fp32.
double optimizer_bytes_per_param(const std::string& type) {
  if (type == "sgd") return 4.0;          // momentum
  if (type == "onebit_adam") return 16.0;  // exp_avg, exp_avg_sq, worker and server residuals
  return 8.0;                             // AdamW: exp_avg, exp_avg_sq
}

// This rank's estimate, MiB: parameters, gradients, optimizer state, autocast copies,
// activations, checkpoint snapshot, total; and its parameter count first.
constexpr int kColumns = 8;

}  // namespace

int dry_run(const Config& cfg, MPI_Comm world, Log& log) {
  int vocab = 0;
  agree(world, [&] { vocab = vocab_of(cfg); });
  const GridShape g = trainable_shape(cfg, world);
  Grid grid(world, g);
  const ModelLayout layout = model_layout(cfg, grid);
  const auto model = plan_model(cfg, vocab, layout);  // this rank's part, counted without building it
  const int M = accumulation_steps(cfg, g.dp);
  const int elem = cfg.precision.type == "fp32" ? 4 : 2;
  // 1F1B keeps at most stages − stage micro-batches' activations (GPipe all of them).
  const int in_flight = cfg.train.schedule == "gpipe" ? M : std::min(layout.stages - layout.stage, M);
  const double n = static_cast<double>(model->parameters()), mib = 1024.0 * 1024.0;
  const double optim = optimizer_bytes_per_param(cfg.optim.type) * n;
  double row[kColumns] = {n,
                          4 * n / mib,
                          4 * n / mib,
                          optim / mib,
                          elem == 2 ? 2 * n / mib : 0.0,  // autocast's low-precision copies of the weights
                          in_flight * model->activation_bytes(cfg.train.micro_batch, elem) / mib,
                          cfg.checkpoint.dir == "none" ? 0.0 : (4 * n + optim) / mib,
                          0.0};
  for (int c = 1; c + 1 < kColumns; ++c) row[kColumns - 1] += row[c];
  // Rank 0 prints one line per stage (its dp = 0, tp = 0 rank) and the maximum over all ranks.
  std::vector<double> all(static_cast<std::size_t>(kColumns * g.size()));
  MPI_Gather(row, kColumns, MPI_DOUBLE, all.data(), kColumns, MPI_DOUBLE, 0, grid.comm());
  std::vector<int> stage_of(static_cast<std::size_t>(g.size())), lead(static_cast<std::size_t>(g.size()));
  const int me_lead = grid.dp().rank() == 0 && grid.tp().rank() == 0;
  MPI_Gather(&layout.stage, 1, MPI_INT, stage_of.data(), 1, MPI_INT, 0, grid.comm());
  MPI_Gather(&me_lead, 1, MPI_INT, lead.data(), 1, MPI_INT, 0, grid.comm());

  char line[512];
  std::snprintf(line, sizeof line,
                "Dry run: %s, grid %d (dp) x %d (tp) x %d (pp), micro-batch %d x %d micro-batches per step (%s), "
                "precision %s, optimizer %s\n"
                "Estimated memory per rank, MiB (activations: Korthikanti et al. 2022, %d micro-batch(es) in flight "
                "on stage 0; plus LibTorch, MPI and the dataset):\n"
                "%6s %12s %9s %9s %9s %9s %11s %9s %9s\n",
                cfg.model.type.c_str(), g.dp, g.tp, g.pp, cfg.train.micro_batch, M, cfg.train.schedule.c_str(),
                cfg.precision.type.c_str(), cfg.optim.type.c_str(), cfg.train.schedule == "gpipe" ? M : std::min(g.pp, M),
                "stage", "parameters",
                "params", "grads", "optim", "casts", "activations", "snapshot", "total");
  std::string text = line;
  double worst = 0;
  for (int r = 0; r < g.size(); ++r) {
    const double* v = &all[static_cast<std::size_t>(kColumns * r)];
    worst = std::max(worst, v[kColumns - 1]);
    if (!lead[static_cast<std::size_t>(r)]) continue;
    std::snprintf(line, sizeof line, "%6d %12.0f %9.1f %9.1f %9.1f %9.1f %11.1f %9.1f %9.1f\n",
                  stage_of[static_cast<std::size_t>(r)], v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    text += line;
  }
  const double flops = model->flops_per_token() * cfg.train.global_batch * cfg.model.block_size;
  std::snprintf(line, sizeof line,
                "Largest total over all %d ranks: %.1f MiB\nFLOPs per step: %.4g (%.4g per rank; 6N + 12LCT per "
                "token)\n",
                g.size(), worst, flops, flops / g.size());
  log.print(text + line);
  return 0;
}

}  // namespace gridtrain
