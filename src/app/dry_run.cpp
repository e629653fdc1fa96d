// gridtrain --dry-run: what a deck will cost on this launch's grid, without training.
#include <cstdio>

#include <torch/torch.h>

#include "gridtrain/app/app.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/language_model.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/h5.hpp"
#include "gridtrain/util/log.hpp"

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

// Optimizer state bytes per parameter, fp32 (error-feedback residuals of 1-bit Adam: ~2 more).
double optimizer_bytes_per_param(const std::string& type) {
  if (type == "sgd") return 4.0;          // momentum
  if (type == "onebit_adam") return 16.0;  // exp_avg, exp_avg_sq, worker and server residuals
  return 8.0;                             // AdamW: exp_avg, exp_avg_sq
}

}  // namespace

int dry_run(const Config& cfg, MPI_Comm world, Log& log) {
  int size = 1;
  MPI_Comm_size(world, &size);
  const GridShape g = resolve_shape(cfg.grid.dp, cfg.grid.tp, cfg.grid.pp, size);
  int vocab = 0;
  agree(world, [&] { vocab = vocab_of(cfg); });
  // The model is built on the host to count its parameters (4 bytes each, once).
  const auto model = make_model(cfg, vocab);
  const double n = static_cast<double>(count_parameters(*model));
  const int elem = cfg.precision.type == "fp32" ? 4 : 2;
  const int accum = cfg.train.global_batch / (cfg.train.micro_batch * g.dp);
  const double mib = 1024.0 * 1024.0;
  const double params = 4 * n, grads = 4 * n, optim = optimizer_bytes_per_param(cfg.optim.type) * n;
  const double casts = elem == 2 ? 2 * n : 0.0;  // autocast's low-precision copies of the weights
  const double acts = model->activation_bytes(cfg.train.micro_batch, elem);
  const double snapshot = cfg.checkpoint.dir == "none" ? 0.0 : params + optim;
  const double total = params + grads + optim + casts + acts + snapshot;
  const double flops = model->flops_per_token() * cfg.train.global_batch * cfg.model.block_size;
  char line[256];
  std::snprintf(line, sizeof line,
                "Dry run: %s, %.0f parameters, grid %d (dp) x %d (tp) x %d (pp), micro-batch %d x accumulation %d, "
                "precision %s\nEstimated memory per rank (every rank holds the whole model while tp = pp = 1):\n",
                cfg.model.type.c_str(), n, g.dp, g.tp, g.pp, cfg.train.micro_batch, accum, cfg.precision.type.c_str());
  std::string text = line;
  auto row = [&](const std::string& what, double bytes) {
    std::snprintf(line, sizeof line, "  %-46s %10.1f MiB\n", what.c_str(), bytes / mib);
    text += line;
  };
  row("parameters (fp32)", params);
  row("gradients (fp32 buckets)", grads);
  row("optimizer state (" + cfg.optim.type + ", fp32)", optim);
  row("autocast weight copies", casts);
  row("activations, one micro-batch (Korthikanti 2022)", acts);
  row("checkpoint snapshot (host)", snapshot);
  row("total (plus LibTorch, MPI and the dataset)", total);
  std::snprintf(line, sizeof line, "FLOPs per step: %.4g (%.4g per rank; 6N + 12LCT per token)\n", flops,
                flops / g.size());
  text += line;
  log.print(text);
  return 0;
}

}  // namespace gridtrain
