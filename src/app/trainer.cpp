#include "gridtrain/app/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <thread>

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/util/autocast.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/memory.hpp"
#include "gridtrain/util/signals.hpp"

namespace gridtrain {
namespace {

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// train.device and comm.backend resolved: picks this rank's GPU when training on CUDA and
// switches the grid to NCCL unless comm.backend = mpi (config.cpp rejected the combinations that
// cannot work when both were explicit; here auto has been resolved).
torch::Device setup_device(const Config& c, Grid& grid) {
  const bool cuda = c.train.device == "cuda" || (c.train.device == "auto" && cuda_available());
  if (!cuda) {
    const std::string resolved = c.train.device == "auto" ? " (train.device = auto found no CUDA device)" : "";
    if (c.comm.backend == "nccl") throw Error("comm.backend = nccl needs train.device = cuda" + resolved);
    if (c.precision.type == "fp16")
      throw Error("precision.type = fp16 needs CUDA" + resolved + "; on the CPU use precision.type = bf16");
    return torch::kCPU;
  }
  try {
    const int index = select_cuda_device(grid.comm());
    if (c.comm.backend != "mpi") grid.use_nccl();
    return {torch::kCUDA, static_cast<torch::DeviceIndex>(index)};
  } catch (const std::runtime_error& e) {
    throw Error(std::string("train.device = ") + c.train.device + ": " + e.what());
  }
}

}  // namespace

int accumulation_steps(const Config& c, int dp) {
  const long long per_step = static_cast<long long>(c.train.micro_batch) * dp;
  if (c.train.global_batch % per_step != 0)
    throw Error("train.global_batch = " + std::to_string(c.train.global_batch) +
                " is not divisible by train.micro_batch * dp = " + std::to_string(c.train.micro_batch) + " * " +
                std::to_string(dp) + "; valid: a multiple of " + std::to_string(per_step));
  return static_cast<int>(c.train.global_batch / per_step);
}

GridShape trainable_shape(const Config& c, MPI_Comm world) {
  int world_size = 1;
  MPI_Comm_size(world, &world_size);
  const GridShape s = resolve_shape(c.grid.dp, c.grid.tp, c.grid.pp, world_size);
  if (c.model.n_head % s.tp != 0)
    throw Error("model.n_head = " + std::to_string(c.model.n_head) + " is not divisible by grid.tp = " +
                std::to_string(s.tp) + "; tensor parallelism splits the attention heads");
  try {
    stage_layers(c.grid.stage_layers, c.model.n_layer, s.pp);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("grid.stage_layers = ") + c.grid.stage_layers + ": " + e.what());
  }
  if ((s.tp > 1 || s.pp > 1) && c.train.on_oom == "backoff")
    throw Error("train.on_oom = backoff needs grid.tp = grid.pp = 1: a rank that runs out of memory inside a "
                "tensor-parallel all-reduce or mid-schedule would leave its peers waiting; use train.on_oom = abort");
  // Fault injection that could never fire is a mistake in the deck, not a passing test.
  if (c.debug.stall_rank >= s.size())
    throw Error("debug.stall_rank = " + std::to_string(c.debug.stall_rank) + " but the job has " +
                std::to_string(s.size()) + " ranks; valid: -1 (off) or 0.." + std::to_string(s.size() - 1));
  if (c.debug.nonfinite != "none") {
    if (c.debug.nonfinite_rank >= s.size())
      throw Error("debug.nonfinite_rank = " + std::to_string(c.debug.nonfinite_rank) + " but the job has " +
                  std::to_string(s.size()) + " ranks; valid: 0.." + std::to_string(s.size() - 1));
    if (c.debug.nonfinite_step > c.train.steps)
      throw Error("debug.nonfinite_step = " + std::to_string(c.debug.nonfinite_step) + " is after the last step (" +
                  std::to_string(c.train.steps) + ")");
    const int stage = c.debug.nonfinite_rank / (s.dp * s.tp);  // grid ranks are (pp, dp, tp), tp fastest
    if (c.debug.nonfinite == "loss" && stage != s.pp - 1)
      throw Error("debug.nonfinite = loss on rank " + std::to_string(c.debug.nonfinite_rank) + ", which is on pipeline "
                  "stage " + std::to_string(stage) + " and computes no loss; valid: a rank of the last stage, " +
                  std::to_string((s.pp - 1) * s.dp * s.tp) + ".." + std::to_string(s.size() - 1));
  }
  if ((s.tp > 1 || s.pp > 1) && c.optim.type == "onebit_adam")
    throw Error("optim.type = onebit_adam keeps gradients local after its freeze and supports grid.tp = grid.pp = 1 "
                "only; use adamw with tp/pp");
  return s;
}

ModelLayout model_layout(const Config& c, Grid& grid) {
  const auto layers = stage_layers(c.grid.stage_layers, c.model.n_layer, grid.shape().pp);
  const int stage = grid.pp().rank();
  ModelLayout layout{&grid.tp(), stage, grid.pp().size(), 0, layers[static_cast<std::size_t>(stage)]};
  for (int s = 0; s < stage; ++s) layout.first_layer += layers[static_cast<std::size_t>(s)];
  return layout;
}

Trainer::Trainer(const Config& cfg, MPI_Comm world, Log& log, double peak_gflops)
    : cfg_(cfg), log_(log), peak_gflops_(peak_gflops), schedule_(cfg) {
  grid_ = std::make_unique<Grid>(world, trainable_shape(cfg, world), cfg.comm.timeout_s);
  device_ = setup_device(cfg, *grid_);
  accum_ = accumulation_steps(cfg, grid_->shape().dp);

  const std::string hint = "Prepare the KJV corpus with: bible -f \"Genesis 1:1-Revelation 22:21\" > data/kjv.txt && "
                           "gridtrain prepare text --input data/kjv.txt --output " + cfg.data.path +
                           " (or run scripts/prepare-kjv)";
  data_ = load_tokens(cfg.data.path, grid_->comm(), static_cast<std::size_t>(cfg.model.block_size) + 1, hint);
  const int vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : data_.vocab_size;
  if (vocab < data_.vocab_size)
    throw Error("model.vocab_size = " + std::to_string(vocab) + " is smaller than the dataset's vocab_size = " +
                std::to_string(data_.vocab_size) + " (" + cfg.data.path + "); valid: 0 (auto) or >= " +
                std::to_string(data_.vocab_size));
  sampler_ = std::make_unique<Sampler>(data_.train, cfg.model.block_size, cfg.train.seed);
  const auto all_val = validation_starts(data_.val.size(), cfg.model.block_size, cfg.train.eval_samples);
  val_total_ = all_val.size();
  if (val_total_ < static_cast<std::size_t>(cfg.train.eval_samples))
    log_.print("Validation: train.eval_samples = " + std::to_string(cfg.train.eval_samples) + " exceeds the " +
               std::to_string(val_total_) + " windows of " + std::to_string(cfg.model.block_size + 1) +
               " tokens in /val/tokens; each pass uses all of them once\n");
  const auto [vb, ve] = share(all_val.size(), grid_->dp().rank(), grid_->dp().size());
  val_starts_.assign(all_val.begin() + vb, all_val.begin() + ve);

  model_ = make_model(cfg, vocab, model_layout(cfg, *grid_));
  model_->initialize(cfg.train.seed);  // on the host, so that every device starts from the same bits
  model_->to(device_);
  // With pp > 1 the first and the last stage each hold wte (embedding and tied head): their
  // gradients are summed over this two-rank axis.
  if (grid_->pp().size() > 1) {
    const int p = grid_->pp().rank(), last = grid_->pp().size() - 1;
    MPI_Comm pair;
    MPI_Comm_split(grid_->pp().comm(), p == 0 || p == last ? 0 : MPI_UNDEFINED, p, &pair);
    if (pair != MPI_COMM_NULL) {
      tied_ = std::make_unique<Axis>("pp (tied embedding)", pair, cfg.comm.timeout_s);
      if (std::string(grid_->pp().backend()) == "nccl") tied_->attach(make_nccl_comm(pair, tied_->name()));
      tied_weight_ = model_->named_parameters(true)["wte.weight"];
    }
  }
  std::vector<NamedParameter> named;
  std::vector<torch::Tensor> params;
  for (auto& p : model_->named_parameters(true)) {
    named.push_back({p.key(), p.value()});
    params.push_back(p.value());
  }
  // The global norm counts each parameter once per replica: tensor-parallel shards on every tp
  // rank, replicated tensors on tp rank 0, the tied head's copy nowhere (its gradient equals
  // the embedding's after the tied sum).
  for (const auto& p : model_->named_parameters(true)) {
    const ShardSpec spec = model_->shard(p.key());
    if (spec.owner && (spec.dim >= 0 || grid_->tp().rank() == 0)) counted_.push_back(p.value());
  }
  reducer_ = std::make_unique<Reducer>(params, grid_->dp(), cfg.comm.bucket_mb, cfg.comm.overlap,
                                       cfg.comm.compression);
  optimizer_ = make_optimizer(cfg, std::move(named), grid_->dp());

  log_.print(grid_->describe() + ", device " + device_.str() + "\n");
  log_.print("Model: " + cfg.model.type + ", " + fmt("%.4g", model_->flops_per_token()) +
             " FLOPs/token (6N + 12LCT); layers per stage " + cfg.grid.stage_layers + " = " +
             join(stage_layers(cfg.grid.stage_layers, cfg.model.n_layer, grid_->shape().pp)) +
             "; parameters per rank " + min_avg_max(static_cast<double>(count_parameters(*model_)), grid_->comm()) +
             "\n");
  log_.print("Data: " + cfg.data.path + ": " + std::to_string(data_.train.size()) + " train / " +
             std::to_string(data_.val.size()) + " val tokens, vocab " + std::to_string(vocab) + ", " +
             std::to_string(sampler_->windows()) + " windows per epoch, source sha256 " +
             (data_.sha256.empty() ? "unknown" : data_.sha256.substr(0, 16)) + "\n");
  log_.print("Batch: global " + std::to_string(cfg.train.global_batch) + " = micro " +
             std::to_string(cfg.train.micro_batch) + " x dp " + std::to_string(grid_->shape().dp) + " x accumulation " +
             std::to_string(accum_) + " sequences of " + std::to_string(cfg.model.block_size) + " tokens; " +
             std::to_string(reducer_->bucket_count()) + " gradient bucket(s)\n");
  log_.print("LR: peak " + fmt("%.4g", schedule_.peak()) + ", lr(0) = " + fmt("%.4g", schedule_(0)) + "\n");

  const bool dynamic = cfg.precision.loss_scaling == "dynamic" ||
                       (cfg.precision.loss_scaling == "auto" && cfg.precision.type == "fp16");
  if (dynamic) {
    const auto& p = cfg.precision;
    scaler_ = std::make_unique<LossScaler>(LossScalerOptions{p.init_scale, p.growth_factor, p.backoff_factor,
                                                             p.growth_interval, p.hysteresis, p.min_scale});
  }
  if (cfg.train.skip_outliers) {
    loss_window_ = std::make_unique<OutlierWindow>(cfg.train.outlier_window, cfg.train.outlier_z);
    norm_window_ = std::make_unique<OutlierWindow>(cfg.train.outlier_window, cfg.train.outlier_z);
  }
  compute_bytes_ = static_cast<int>(torch::elementSize(compute_dtype(cfg.precision.type)));
  log_.print("Precision: " + cfg.precision.type + " compute, fp32 weights and optimizer state" +
             (scaler_ ? ", dynamic loss scale from " + fmt("%g", scaler_->scale()) : "") + "\n");

  checkpointer_ = std::make_unique<Checkpointer>(cfg, *grid_, log_,
                                                 CorpusId{data_.sha256, data_.train.size(), data_.val.size()});
  if (auto path = checkpointer_->resume_path()) {
    const ResumePoint at = checkpointer_->load(*path, *model_, *optimizer_);
    start_step_ = at.step;
    sample_index_ = at.sample_index;
    restore(at.train);
  }
}

Trainer::~Trainer() = default;

torch::Tensor Trainer::train_batch(std::uint64_t first, int rows) {
  const int T1 = cfg_.model.block_size + 1;
  auto batch = torch::empty({rows, T1}, torch::kLong);  // (B, T+1)
  auto* out = batch.data_ptr<std::int64_t>();
  for (int b = 0; b < rows; ++b) sampler_->fill(first + b, out + static_cast<std::size_t>(b) * T1);
  return batch.to(device_);
}

bool Trainer::injects(const std::string& what, long long step) const {
  const auto& d = cfg_.debug;
  return d.nonfinite == what && grid_->rank() == d.nonfinite_rank && step + 1 >= d.nonfinite_step &&
         step + 1 < d.nonfinite_step + d.nonfinite_steps;
}

// One step's micro-batches through this rank's pipeline stage in the order of train.schedule
// (with one stage: forward, backward, forward, backward, ... = plain gradient accumulation).
// Activations go to the next stage and their gradients come back by non-blocking sends and
// blocking receives on grid.pp(); time waiting to receive is the Bubble section.
double Trainer::forward_backward(long long step, double loss_scale) {
  const int B = cfg_.train.micro_batch, T = cfg_.model.block_size, M = accum_;
  Axis& pp = grid_->pp();
  const bool first = model_->first_stage(), last = model_->last_stage();
  const std::uint64_t first_sample = sample_index_ + static_cast<std::uint64_t>(grid_->dp().rank()) * B * M;
  if (cfg_.debug.alloc_limit_mb > 0) {  // fault injection: as if a micro-batch's activations did not fit
    // Decided over the grid, as the out-of-memory flag is: with pp > 1 only the last stage's
    // estimate includes the logits, and a stage that fails alone would leave its neighbours waiting.
    double over = model_->activation_bytes(B, compute_bytes_) > cfg_.debug.alloc_limit_mb * 1024 * 1024 ? 1 : 0;
    grid_->all().allreduce_sum(&over, 1, "debug.alloc_limit_mb");
    if (over > 0) throw std::bad_alloc();
  }
  std::vector<torch::Tensor> inputs(M), outputs(M), losses(M), in_flight;
  std::vector<Work> sends;
  auto send = [&](const torch::Tensor& t, int peer, int tag) {
    in_flight.push_back(t.detach().to(torch::kFloat).contiguous());
    sends.push_back(pp.send(in_flight.back().data_ptr(), in_flight.back().nbytes(), peer, tag, "micro-batch"));
  };
  auto recv = [&](int peer, int tag) {
    auto t = torch::empty({B, T, cfg_.model.n_embd}, torch::TensorOptions(torch::kFloat).device(device_));
    timer_.stamp(Section::Compute);
    pp.recv(t.data_ptr(), t.nbytes(), peer, tag, "micro-batch").wait();
    timer_.stamp(Section::Bubble);
    return t;
  };
  torch::Tensor loss_sum;  // last stage: Σ losses, read once at the end (one device sync)
  int backwards_left = M;
  for (const PipeOp& op : pipeline_schedule(cfg_.train.schedule, pp.rank(), pp.size(), M)) {
    const int m = op.micro_batch;
    if (op.kind == PipeOp::Forward) {
      torch::Tensor batch;  // (B, T+1): the first stage's inputs, the last stage's targets
      if (first || last) batch = train_batch(first_sample + static_cast<std::uint64_t>(m) * B, B);
      timer_.stamp(Section::Data);
      inputs[m] = first ? batch.slice(1, 0, T) : recv(pp.rank() - 1, m).requires_grad_();
      AutocastGuard autocast(cfg_.precision.type, device_);
      outputs[m] = model_->stage_forward(inputs[m]);
      if (last) {
        losses[m] = model_->head_loss_sum(outputs[m], batch.slice(1, 1, T + 1)) / (static_cast<double>(B) * T * M);
        if (injects("loss", step)) losses[m] = losses[m] + std::numeric_limits<double>::quiet_NaN();
        loss_sum = loss_sum.defined() ? loss_sum + losses[m].detach() : losses[m].detach();
      } else {
        send(outputs[m], pp.rank() + 1, m);
      }
    } else {
      const bool final_backward = --backwards_left == 0;
      // An Inf in a gradient before backward stays Inf through accumulation and the allreduce;
      // written before any bucket can be in flight.
      if (final_backward && injects("grad", step))
        model_->parameters().front().mutable_grad().view(-1)[0].fill_(INFINITY);
      // An optimizer that exchanges its own state (1-bit Adam after its freeze) keeps gradients local.
      reducer_->begin_backward(final_backward && !optimizer_->owns_communication());
      if (last) {
        (loss_scale != 1.0 ? losses[m] * loss_scale : losses[m]).backward();
      } else {
        const auto grad = recv(pp.rank() + 1, m);
        outputs[m].backward(grad);
      }
      if (!first) send(inputs[m].grad(), pp.rank() - 1, m);
      inputs[m] = outputs[m] = losses[m] = torch::Tensor();  // free this micro-batch's activations
    }
    timer_.stamp(Section::Compute);
  }
  for (auto& w : sends) w.wait();
  timer_.stamp(Section::Bubble);
  return loss_sum.defined() ? loss_sum.item<double>() : 0.0;
}

// Validation through the pipeline (forward only); the last stage's tp rank 0 counts the loss.
double Trainer::evaluate() {
  torch::NoGradGuard no_grad;
  Axis& pp = grid_->pp();
  const int T = cfg_.model.block_size, B = cfg_.train.micro_batch;
  const bool counts = model_->last_stage() && grid_->tp().rank() == 0;
  double sums[2] = {0.0, 0.0};  // loss sum (nats), tokens
  for (std::size_t i = 0; i < val_starts_.size(); i += B) {
    const int rows = static_cast<int>(std::min<std::size_t>(B, val_starts_.size() - i));
    torch::Tensor batch, x;  // (rows, T+1) windows: the first stage's inputs, the last stage's targets
    if (model_->first_stage() || model_->last_stage()) {
      batch = torch::empty({rows, T + 1}, torch::kLong);
      auto* out = batch.data_ptr<std::int64_t>();
      for (int b = 0; b < rows; ++b) copy_window(data_.val, val_starts_[i + b], T, out + b * (T + 1));
      batch = batch.to(device_);
      x = batch.slice(1, 0, T);
    }
    if (!model_->first_stage()) {
      x = torch::empty({rows, T, cfg_.model.n_embd}, torch::TensorOptions(torch::kFloat).device(device_));
      pp.recv(x.data_ptr(), x.nbytes(), pp.rank() - 1, 0, "validation").wait();
    }
    AutocastGuard autocast(cfg_.precision.type, device_);
    auto y = model_->stage_forward(x);
    if (!model_->last_stage()) {
      auto h = y.to(torch::kFloat).contiguous();
      pp.send(h.data_ptr(), h.nbytes(), pp.rank() + 1, 0, "validation").wait();
      continue;
    }
    const double loss = model_->head_loss_sum(y, batch.slice(1, 1, T + 1)).item<double>();
    if (counts) sums[0] += loss, sums[1] += static_cast<double>(rows) * T;
  }
  grid_->all().allreduce_sum(sums, 2, "validation loss");
  return sums[0] / sums[1];
}

// Σ ||g||² over counted_; summed over the grid it counts every parameter dp times.
double Trainer::counted_grad_sq() const {
  if (counted_.empty()) return 0.0;
  std::vector<torch::Tensor> norms;  // fp32 kernels with blocked accumulation, combined in fp64
  for (const auto& p : counted_) norms.push_back(p.grad().norm());
  return torch::stack(norms).to(torch::kDouble).square().sum().item<double>();  // one device sync
}

// One optimizer step. Every rank reaches the same verdict from one reduction over the whole
// grid (the loss, the squared norm, a non-finite flag and an out-of-memory flag), so a skip or a
// retry never leaves ranks in different places.
Trainer::StepOutcome Trainer::train_step(long long s, double lr) {
  reducer_->zero_grad();
  timer_.stamp(Section::Other);
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  const bool local_grads = optimizer_->owns_communication();
  double local_loss = 0.0, oom = 0.0;
  try {
    local_loss = forward_backward(s, loss_scale);
  } catch (const std::bad_alloc&) {
    oom = 1.0;
  } catch (const c10::OutOfMemoryError&) {
    oom = 1.0;
  }
  // The gradient exchange runs even after an out-of-memory error, so that every rank issues the
  // same collectives; the step is then discarded.
  if (!local_grads) {
    exposed_comm_s_ += reducer_->finish();
    total_comm_s_ += reducer_->comm_s();
  }
  if (tied_) {  // embedding + tied head: one gradient, held by two stages (summed even after an OOM: a collective)
    auto g = tied_weight_.grad();  // a view into its gradient bucket
    tied_->allreduce_sum(g.data_ptr<float>(), static_cast<std::size_t>(g.numel()), "tied embedding gradient").wait();
  }
  const double local_sq = counted_grad_sq() / (loss_scale * loss_scale);
  const bool counts_loss = model_->last_stage() && grid_->tp().rank() == 0;
  double sums[4] = {counts_loss ? local_loss : 0.0, local_sq,
                    std::isfinite(local_loss) && std::isfinite(local_sq) ? 0.0 : 1.0, oom};
  grid_->all().allreduce_sum(sums, 4, "loss, gradient norm and step flags");
  timer_.stamp(Section::Comm);
  if (sums[3] > 0) return back_off(s, static_cast<int>(sums[3]));

  const int dp = grid_->dp().size();
  const double loss = sums[0] / dp;
  // Every parameter is counted once per dp replica. Reported: the norm of the averaged gradient,
  // or with local gradients (tp = pp = 1) the RMS of the ranks' norms; clipping uses what this
  // rank holds.
  const double norm = std::sqrt(sums[1] / dp);
  const double clip_norm = local_grads ? std::sqrt(local_sq) : norm;
  const bool finite = sums[2] == 0;
  const bool outlier = finite && loss_window_ && (loss_window_->is_outlier(loss) || norm_window_->is_outlier(norm));
  if (scaler_) scaler_->update(finite);
  if (!finite || outlier) {
    skip(s, finite ? "outlier" : "non-finite", loss, norm);
    return {loss, norm};
  }
  stuck_ = 0;
  if (loss_window_) loss_window_->add(loss), norm_window_->add(norm);
  double factor = 1.0 / loss_scale;  // unscale and clip in one pass over the gradients
  if (cfg_.optim.clip_grad > 0 && clip_norm > cfg_.optim.clip_grad) factor *= cfg_.optim.clip_grad / (clip_norm + 1e-6);
  if (factor != 1.0) reducer_->scale(factor);
  optimizer_->step(lr);
  return {loss, norm};
}

void Trainer::skip(long long s, const char* why, double loss, double norm) {
  const bool nonfinite = std::string(why) == "non-finite";
  ++(nonfinite ? skipped_nonfinite_ : skipped_outliers_);
  log_.print("Step " + std::to_string(s + 1) + ": update skipped, " + why + " (loss " + fmt("%.4g", loss) +
             ", grad norm " + fmt("%.4g", norm) + (scaler_ ? ", loss scale now " + fmt("%g", scaler_->scale()) : "") +
             ")\n");
  // A non-finite step above the minimum loss scale is the scaler at work; any other skip in a
  // row means training is not going on.
  if (nonfinite && scaler_ && !scaler_->at_min()) return;
  if (++stuck_ < cfg_.train.max_consecutive_skips) return;
  const std::string hint =
      nonfinite ? std::string("non-finite loss or gradient") +
                      (scaler_ ? " at the minimum loss scale " + fmt("%g", scaler_->scale()) : "") +
                      "); lower optim.lr or raise optim.warmup_steps" +
                      (cfg_.precision.type == "fp16" ? ", or use precision.type = bf16" : "")
                : std::string("loss or gradient-norm spike beyond train.outlier_z); the run has left the last "
                              "train.outlier_window accepted steps behind: raise train.outlier_z or "
                              "train.outlier_window, or set train.skip_outliers = false");
  throw Error("step " + std::to_string(s + 1) + ": " + std::to_string(stuck_) +
              " updates in a row were skipped (train.max_consecutive_skips = " +
              std::to_string(cfg_.train.max_consecutive_skips) + "; the last for a " + hint);
}

// Out of memory on `ranks` ranks: with train.on_oom = backoff, every rank halves the
// micro-batch and doubles accumulation (same global batch, same LR) and the step is retried.
Trainer::StepOutcome Trainer::back_off(long long s, int ranks) {
  const int B = cfg_.train.micro_batch;
  const std::string what = "step " + std::to_string(s + 1) + ": out of memory in forward/backward on " +
                           std::to_string(ranks) + " rank(s) with train.micro_batch = " + std::to_string(B);
  const bool can_back_off = grid_->shape().tp == 1 && grid_->shape().pp == 1;
  if (cfg_.train.on_oom != "backoff")
    throw Error(what + "; lower train.micro_batch (accumulation keeps the global batch)" +
                (can_back_off ? " or set train.on_oom = backoff" : ""));
  const std::string after = oom_backoffs_ ? " after " + std::to_string(oom_backoffs_) + " backoff(s)" : "";
  if (B == 1) throw Error(what + after + ": nothing left to halve; a single sequence does not fit");
  if (B % 2 != 0) throw Error(what + after + ", which cannot be halved; start from a power of two");
  cfg_.train.micro_batch = B / 2;
  accum_ *= 2;
  ++oom_backoffs_;
  log_.print(what + ": micro-batch " + std::to_string(B) + " -> " + std::to_string(B / 2) + ", accumulation " +
             std::to_string(accum_ / 2) + " -> " + std::to_string(accum_) + "; retrying the step\n");
  return {0.0, 0.0, /*retry=*/true};
}

std::uint64_t Trainer::pp_bytes_sent() const {
  return grid_->pp().bytes_sent() + (tied_ ? tied_->bytes_sent() : 0);
}

TrainState Trainer::train_state() const {
  TrainState st{{"skipped_steps", {static_cast<double>(skipped_nonfinite_), static_cast<double>(skipped_outliers_),
                                   static_cast<double>(stuck_)}}};
  if (scaler_) {
    const auto a = scaler_->state();
    st.push_back({"loss_scaler", {a.begin(), a.end()}});
  }
  if (loss_window_) {
    st.push_back({"outlier_window_loss", loss_window_->state()});
    st.push_back({"outlier_window_grad_norm", norm_window_->state()});
  }
  return st;
}

void Trainer::restore(const TrainState& st) {
  for (const auto& [name, v] : st) {
    if (name == "skipped_steps" && v.size() == 3) {
      skipped_nonfinite_ = static_cast<long long>(v[0]);
      skipped_outliers_ = static_cast<long long>(v[1]);
      stuck_ = static_cast<long long>(v[2]);
    } else if (name == "loss_scaler" && scaler_ && v.size() == 3) {
      scaler_->set_state({v[0], v[1], v[2]});
    } else if (name.rfind("outlier_window_", 0) == 0 && loss_window_) {
      try {
        (name == "outlier_window_loss" ? loss_window_ : norm_window_)->set_state(v);
      } catch (const std::invalid_argument& e) {
        log_.print(std::string("Outlier windows start empty: ") + e.what() + "\n");
        loss_window_->set_state(OutlierWindow(cfg_.train.outlier_window, cfg_.train.outlier_z).state());
        norm_window_->set_state(loss_window_->state());
      }
    }
  }
}

RunResult Trainer::run() {
  RunResult r;
  Thermo thermo(log_, cfg_.output.dir + "/metrics.jsonl", start_step_);
  const long long steps = cfg_.train.steps;
  const double tokens_per_step = static_cast<double>(cfg_.train.global_batch) * cfg_.model.block_size;
  double peak_total = peak_gflops_ * 1e9;  // FLOP/s summed over ranks
  MPI_Allreduce(MPI_IN_PLACE, &peak_total, 1, MPI_DOUBLE, MPI_SUM, grid_->comm());
  const double flops_per_step = model_->flops_per_token() * tokens_per_step;

  using Clock = std::chrono::steady_clock;
  const auto loop_start = Clock::now();
  auto interval_start = loop_start;
  double interval_eval_s = 0.0;
  long long interval_steps = 0;
  if (start_step_ >= steps) {
    log_.print("Nothing to run: the checkpoint is at step " + std::to_string(start_step_) + " and train.steps = " +
               std::to_string(steps) + "\n");
    return r;
  }
  timer_.reset();
  for (long long s = start_step_; s < steps; ++s) {
    if (s == 1 && grid_->rank() == cfg_.debug.stall_rank)  // fault injection: a rank late to step 2
      std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.debug.stall_s));
    const double lr = schedule_(s);
    const std::uint64_t tp_before = grid_->tp().bytes_sent(), pp_before = pp_bytes_sent();
    const StepOutcome step = train_step(s, lr);
    tp_bytes_ += grid_->tp().bytes_sent() - tp_before;  // training traffic only, not validation
    pp_bytes_ += pp_bytes_sent() - pp_before;
    if (step.retry) {  // out of memory, backed off: the same step again with smaller micro-batches
      --s;
      continue;
    }
    const double loss = step.loss, norm = step.norm;
    const std::uint64_t step_bytes = reducer_->bytes_sent() + optimizer_->bytes_sent();
    dp_bytes_ += step_bytes;
    sample_index_ += static_cast<std::uint64_t>(cfg_.train.global_batch);
    r.losses.push_back(loss);
    r.grad_norms.push_back(norm);
    ++interval_steps;
    timer_.stamp(Section::Optim);

    const bool last = s + 1 == steps;
    std::optional<double> val;
    if (last || (cfg_.train.eval_interval > 0 && (s + 1) % cfg_.train.eval_interval == 0)) {
      const auto t0 = Clock::now();
      val = evaluate();
      interval_eval_s += std::chrono::duration<double>(Clock::now() - t0).count();
      timer_.stamp(Section::Eval);
    }
    if (last || s == 0 || (s + 1) % cfg_.output.thermo == 0 || val) {
      const double train_s =
          std::chrono::duration<double>(Clock::now() - interval_start).count() - interval_eval_s;
      const double tps = tokens_per_step * interval_steps / train_s;
      thermo.write({s + 1, loss, val, lr, norm, tps, 1e3 * train_s / interval_steps,
                    flops_per_step * interval_steps / train_s / peak_total, step_bytes,
                    scaler_ ? scaler_->scale() : 1.0, skipped_nonfinite_ + skipped_outliers_});
      interval_start = Clock::now();
      interval_eval_s = 0.0;
      interval_steps = 0;
      timer_.stamp(Section::Output);
    }
    if (last) r.final_val_loss = val;

    // A signal on the last step changes nothing: the run is complete.
    const int sig = agree_stop_signal(grid_->all());
    const bool stop = sig != 0 && !last;
    if (checkpointer_->due(s + 1) || (stop && checkpointer_->enabled()))
      checkpointer_->save(s + 1, sample_index_, sampler_->epoch(sample_index_), *model_, *optimizer_, train_state());
    timer_.stamp(Section::Checkpoint);
    if (stop) {
      r.stop_signal = sig;
      r.checkpointed = checkpointer_->enabled();
      log_.print("Stopping after step " + std::to_string(s + 1) + " on signal " + std::to_string(sig) +
                 (r.checkpointed ? "; checkpoint saved\n" : "; no checkpoint (checkpoint.dir = none)\n"));
      break;
    }
  }
  checkpointer_->wait();
  timer_.stamp(Section::Checkpoint);
  r.skipped = skipped_nonfinite_ + skipped_outliers_;
  r.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  const double steps_run = static_cast<double>(r.losses.size());
  r.loop_s = std::chrono::duration<double>(Clock::now() - loop_start).count();
  r.tokens_per_s = tokens_per_step * steps_run / r.loop_s;
  r.mfu = flops_per_step * steps_run / r.loop_s / peak_total;
  print_summary(r);
  return r;
}

void Trainer::print_summary(const RunResult& r) {
  const auto stats = timer_.breakdown(grid_->comm(), r.loop_s);
  const auto steps = static_cast<long long>(r.losses.size());
  const double tokens = static_cast<double>(steps) * cfg_.train.global_batch * cfg_.model.block_size;
  log_.print("\nLoop time of " + fmt("%.6g", r.loop_s) + " on " + std::to_string(grid_->shape().size()) +
             " procs for " + std::to_string(steps) + " steps with " + fmt("%.0f", tokens) + " tokens\n\n");
  log_.print("Performance: " + fmt("%.1f", r.tokens_per_s) + " tokens/s, " +
             fmt("%.2f", r.tokens_per_s / cfg_.model.block_size) + " samples/s, " + fmt("%.2f", 100.0 * r.mfu) +
             "% MFU (peak " + fmt("%.1f", peak_gflops_) + " GFLOP/s per rank" +
             (cfg_.output.peak_gflops > 0 ? ", from output.peak_gflops)\n" : ", measured by sgemm probe)\n"));
  log_.print(format_breakdown(stats));
  double comm[2] = {total_comm_s_, exposed_comm_s_};
  grid_->dp().allreduce_sum(comm, 2);
  if (grid_->dp().size() > 1)
    log_.print("\nGradient allreduce (dp, avg over ranks): " + fmt("%.3f", comm[0] / grid_->dp().size()) +
               " s in flight, " + fmt("%.3f", comm[1] / grid_->dp().size()) + " s exposed (comm.overlap = " +
               (cfg_.comm.overlap ? "true" : "false") + ", " + std::to_string(reducer_->bucket_count()) +
               " buckets)\n");
  double bytes[3] = {static_cast<double>(dp_bytes_), static_cast<double>(tp_bytes_), static_cast<double>(pp_bytes_)};
  grid_->all().allreduce_sum(bytes, 3);
  const double per = static_cast<double>(grid_->shape().size()) * static_cast<double>(std::max(1LL, steps));
  log_.print("Bytes sent per training step and rank (avg over ranks): dp " + fmt("%.0f", bytes[0] / per) + ", tp " +
             fmt("%.0f", bytes[1] / per) + ", pp " + fmt("%.0f", bytes[2] / per) + "\n");
  if (checkpointer_->saves() > 0)
    log_.print("\nCheckpoints: " + std::to_string(checkpointer_->saves()) + " written to " + cfg_.checkpoint.dir +
               ", step-loop stall " + fmt("%.3f", checkpointer_->stall_s()) + " s, write " +
               fmt("%.3f", checkpointer_->write_s()) + (cfg_.checkpoint.async ? " s (background)" : " s") +
               ", waiting for the last write at exit " + fmt("%.3f", checkpointer_->drain_s()) + " s\n");
  log_.print("\nStability: " + std::to_string(skipped_nonfinite_ + skipped_outliers_) + " update(s) skipped (" +
             std::to_string(skipped_nonfinite_) + " non-finite, " + std::to_string(skipped_outliers_) + " outlier)" +
             (scaler_ ? ", loss scale " + fmt("%g", scaler_->scale()) : "") +
             (oom_backoffs_ ? ", " + std::to_string(oom_backoffs_) + " out-of-memory backoff(s) to train.micro_batch = " +
                                  std::to_string(cfg_.train.micro_batch) : "") + "\n");
  log_.print("Memory: peak RSS " + min_avg_max(peak_rss_bytes(), grid_->comm(), 1024.0 * 1024.0, "MiB") + "\n");
#ifdef GRIDTRAIN_CUDA
  if (device_.is_cuda()) {  // the same on every rank: train.device is one setting
    const auto cuda = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    log_.print("CUDA memory: peak allocated " +
               min_avg_max(static_cast<double>(cuda.allocated_bytes[all].peak), grid_->comm(), 1024.0 * 1024.0,
                           "MiB") +
               "; peak reserved by the caching allocator " +
               min_avg_max(static_cast<double>(cuda.reserved_bytes[all].peak), grid_->comm(), 1024.0 * 1024.0,
                           "MiB") +
               "\n");
  }
#endif
  if (r.final_val_loss)
    log_.print("\nFinal validation loss: " + fmt("%.4f", *r.final_val_loss) + " nats/token (" +
               fmt("%.4f", *r.final_val_loss / std::log(2.0)) + " bits/token) over " + std::to_string(val_total_) +
               " windows\n");
}

}  // namespace gridtrain
