#include "gridtrain/app/trainer.hpp"

#include <cmath>
#include <limits>
#include <new>
#include <tuple>
#include <utility>

#include "gridtrain/app/peak.hpp"
#include "gridtrain/app/sync_check.hpp"
#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/output/rank_stats.hpp"
#include "gridtrain/output/summary.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/precision/autocast.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

Trainer::Trainer(const Config& cfg, MPI_Comm world, Log& log, double peak_gflops, std::string peak_source)
    : cfg_(cfg), log_(log), peak_gflops_(peak_gflops), peak_source_(std::move(peak_source)),
      plan_(plan_launch(cfg, [world] { int n = 1; MPI_Comm_size(world, &n); return n; }())),
      grid_(std::make_unique<Grid>(world, plan_.shape, cfg.comm.timeout_s)), faults_(cfg_.debug, grid_->rank()),
      schedule_(cfg) {
  // From here on cfg_, the Trainer's own copy: the parts keep references to it.
  cuda_device_ = place_rank(plan_, cfg_, *grid_);
  if (cuda_device_ >= 0) device_ = {torch::kCUDA, static_cast<torch::DeviceIndex>(cuda_device_)};
  if (cuda_device_ >= 0 && cfg_.output.timer == TimerMode::Sync) timer_.set_sync(synchronize_device);
  if (peak_gflops_ <= 0) {  // a GPU's peak, now that this rank has its device
    const Peak peak = rank_peak(cfg_, cuda_device_ >= 0);
    peak_gflops_ = peak.gflops;
    peak_source_ = peak.source;
    log_.print("Peak: " + fmt("%.1f", peak_gflops_) + " GFLOP/s per rank (" + peak_source_ + ", rank 0)\n");
  }
  load_data();
  build_model();
  guard_ = std::make_unique<StepGuard>(cfg_, grid_->all(), plan_.shape.dp, cfg_.train.micro_batch,
                                       plan_.accumulation, log_);
  describe_setup();
  checkpointer_ = std::make_unique<Checkpointer>(cfg_, *grid_, log_, samples_->id());
  if (auto path = checkpointer_->resume_path()) {
    const WholeParameters whole(*reducer_, /*adopt=*/true);  // ZeRO stage 3: loaded whole, then sharded
    const ResumePoint at = checkpointer_->load(*path, *model_, *optimizer_);
    start_step_ = at.step;
    sample_index_ = at.sample_index;
    guard_->restore(at.train);
  }
}

Trainer::~Trainer() = default;

void Trainer::load_data() {
  samples_ = load_samples(cfg_, grid_->comm());
  // This dp rank's share of a step that starts at global sample i: rows samples from i + rank·rows
  // (micro-batch × accumulation, constant through out-of-memory back-offs).
  const int rows = cfg_.train.global_batch / plan_.shape.dp;
  const auto mine = static_cast<std::uint64_t>(grid_->dp().rank() * rows);
  auto fill = [this, mine](std::uint64_t i, std::int64_t* out) { samples_->train_row(mine + i, out); };
  windows_ = std::make_unique<WindowPrefetcher>(rows, samples_->width(), device_, fill, cfg_.data.prefetch,
                                                static_cast<std::uint64_t>(cfg_.train.global_batch));
  const auto all_val = samples_->validation(cfg_.train.eval_samples);
  val_total_ = all_val.size();
  if (val_total_ < static_cast<std::size_t>(cfg_.train.eval_samples))
    log_.print("Validation: train.eval_samples = " + std::to_string(cfg_.train.eval_samples) + " exceeds the " +
               std::to_string(val_total_) + " " + samples_->validation_samples() + "; each pass uses all of them once\n");
  const auto [vb, ve] = share(all_val.size(), grid_->dp().rank(), grid_->dp().size());
  val_ids_.assign(all_val.begin() + vb, all_val.begin() + ve);
  double most = static_cast<double>(val_ids_.size());  // the first total % dp ranks have one more
  grid_->dp().blocking_max(&most, 1, "validation samples");
  val_rows_max_ = static_cast<std::int64_t>(most);
}

void Trainer::build_model() {
  model_ = make_model(cfg_, samples_->shape(), model_layout(plan_, *grid_));
  model_->initialize(cfg_.train.seed);  // on the host, so that every device starts from the same bits
  model_->to(device_);
  for (auto& [name, t] : model_->replica_state()) replica_.push_back(t);  // updated in place: held once
  std::vector<NamedParameter> named;
  std::vector<torch::Tensor> params;
  ZeroOptions zero{cfg_.optim.zero_stage, {}, cfg_.optim.zero_prefetch};
  for (auto& p : model_->named_parameters(true)) {
    if (p.key() == "wte.weight") tied_ = static_cast<std::ptrdiff_t>(params.size());  // also the output head
    // Stage 3 gathers the model's units; below, the tied embedding alone gets a bucket of its own.
    zero.unit_of.push_back(zero.stage == 3 ? model_->unit_of(p.key()) : p.key() == "wte.weight" ? 0 : -1);
    named.push_back({p.key(), p.value()});
    params.push_back(p.value());
    // The global norm counts each parameter once per replica: tensor-parallel shards on every
    // tp rank, replicated tensors on tp rank 0, the tied head's copy nowhere (its gradient
    // equals the embedding's after the tied sum).
    const ShardSpec spec = model_->shard(p.key());
    if (spec.owner && (spec.dim >= 0 || grid_->tp().rank() == 0)) counted_.push_back(params.size() - 1);
  }
  const Config::Comm& comm = cfg_.comm;
  reducer_ = std::make_unique<Reducer>(params, grid_->dp(), comm.bucket_mb, comm.overlap, comm.compression, zero);
  if (reducer_->zero_stage() > 0) {  // the optimizer updates this rank's pieces only
    const auto pieces = reducer_->shard_pieces();
    for (std::size_t i = 0; i < named.size(); ++i)
      named[i] = {named[i].name, pieces[i].param, named[i].param.sizes().vec(), pieces[i].offset};
  }
  if (reducer_->zero_stage() == 3) model_->set_parameter_gather(reducer_.get());
  optimizer_ = make_optimizer(cfg_, std::move(named), grid_->dp());
  engine_ = std::make_unique<PipelineEngine>(*grid_, cfg_.train.schedule, cfg_.model.block_size, cfg_.model.n_embd,
                                             device_, model_->first_stage(), model_->last_stage(), tied_ >= 0, timer_);
}

void Trainer::describe_setup() const {
  const ModelPlan& m = model_->plan();
  log_.print(grid_->describe() + ", device " + device_.str() + "\n");
  const std::string kind = cfg_.model.type == ModelType::Gpt
                               ? std::string(", attention ") + (fused_attention(cfg_) ? "sdpa" : "math") + ", " +
                                     fmt("%.4g", m.flops_per_item()) + " FLOPs/token (6N + 12LCT); layers per stage " +
                                     show_key(cfg_, "grid.stage_layers") + " = " + comma_list(plan_.stage_layers)
                               : ", channels " + comma_list(cfg_.model.channels) + ", " + fmt("%.4g", m.flops_per_item()) +
                                     " FLOPs/image";
  log_.print(std::string("Model: ") + name_of(cfg_.model.type) + kind + "; parameters per rank " +
             min_avg_max(static_cast<double>(count_parameters(*model_)), grid_->all()) + "\n");
  log_.print("Data: " + samples_->describe() + "\n");
  const std::string sample = cfg_.model.type == ModelType::Gpt
                                 ? "sequences of " + std::to_string(cfg_.model.block_size) + " tokens"
                                 : std::string("images");
  log_.print("Batch: global " + std::to_string(cfg_.train.global_batch) + " = micro " +
             std::to_string(cfg_.train.micro_batch) + " x dp " + std::to_string(plan_.shape.dp) + " x accumulation " +
             std::to_string(plan_.accumulation) + " " + sample + "; " + std::to_string(reducer_->bucket_count()) +
             " gradient bucket(s)\n");
  log_.print("LR: peak " + fmt("%.4g", schedule_.peak()) + ", lr(0) = " + fmt("%.4g", schedule_(0)) + "\n");
  log_.print(std::string("Precision: ") + name_of(cfg_.precision.type) + " compute, fp32 weights and optimizer state" +
             (guard_->scaling() ? ", dynamic loss scale from " + fmt("%g", guard_->loss_scale()) : "") + "\n");
}

PipelineEngine::Forward Trainer::stage_forward(long long s) {
  return [this, s](const torch::Tensor& x, const torch::Tensor& targets) {
    AutocastGuard autocast(cfg_.precision.type, device_);
    auto y = model_->stage_forward(x);
    if (!targets.defined()) return y;
    auto loss = model_->head_loss_sum(y, targets);
    return faults_.nan_loss(s) ? loss + std::numeric_limits<double>::quiet_NaN() : loss;
  };
}

// Validation through the pipeline (forward only); the last stage's tp rank 0 counts the sums.
Trainer::Validation Trainer::evaluate() {
  struct EvalMode {  // batch norm normalises with its running statistics, and leaves them be
    Model& m;
    explicit EvalMode(Model& model) : m(model) { m.eval(); }
    ~EvalMode() { m.train(); }
  } eval_mode(*model_);
  const int width = samples_->width();
  const auto rows = static_cast<std::int64_t>(val_ids_.size());
  auto windows = [&](std::int64_t first, int n) {
    return model_->split(sample_rows(n, width, device_, [&](int b, std::int64_t* out) {
      if (first >= rows) std::fill(out, out + width, 0);  // a padding forward's row: its sums are dropped
      else samples_->val_row(val_ids_[static_cast<std::size_t>(first + b)], out);
    }));
  };
  auto forward = [this](const torch::Tensor& x, const torch::Tensor& targets) {
    AutocastGuard autocast(cfg_.precision.type, device_);
    auto y = model_->stage_forward(x);
    return targets.defined() ? model_->head_sums(y, targets) : y;
  };
  const auto sums = engine_->evaluate(rows, val_rows_max_, guard_->micro_batch(), windows, forward);
  const bool counts = model_->last_stage() && grid_->tp().rank() == 0;
  // nats, correct predictions, items
  double total[3] = {counts && !sums.empty() ? sums[0] : 0.0, counts && sums.size() > 1 ? sums[1] : 0.0,
                     counts ? static_cast<double>(rows * model_->plan().items_per_sample()) : 0.0};
  grid_->all().blocking_sum(total, 3, "validation sums");
  Validation v{total[0] / total[2], std::nullopt};
  if (model_->classifier()) v.accuracy = total[1] / total[2];
  return v;
}

std::vector<torch::Tensor> Trainer::clone_replica_state() const {
  std::vector<torch::Tensor> out;
  for (const auto& t : replica_) out.push_back(t.clone());
  return out;
}

void Trainer::restore_replica_state(const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < saved.size(); ++i) replica_[i].copy_(saved[i]);
}

// Batch-norm running statistics: each dp replica's EMA of its own micro-batches' statistics,
// averaged so that the replicas stay equal.
void Trainer::average_replica_state() {
  if (replica_.empty() || grid_->dp().size() == 1) return;
  std::vector<torch::Tensor> flat;
  for (const auto& t : replica_) flat.push_back(t.reshape({-1}));
  auto all = torch::cat(flat);
  grid_->dp().allreduce_sum(all.data_ptr<float>(), static_cast<std::size_t>(all.numel()), "batch-norm statistics").wait();
  all.div_(grid_->dp().size());
  std::int64_t at = 0;
  torch::NoGradGuard no_grad;
  for (auto& t : replica_) {
    t.copy_(all.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
}

// {loss, Σ ||g||² over counted_} to the host: the step's one device→host copy. Summed over the
// grid the norm counts every parameter dp times (under ZeRO a rank holds 1/dp of each: × dp).
std::pair<double, double> Trainer::loss_and_grad_sq(const torch::Tensor& loss) const {
  const auto on = torch::TensorOptions(torch::kDouble).device(device_);
  std::vector<torch::Tensor> norms;  // fp32 kernels with blocked accumulation, combined in fp64
  for (const auto i : counted_) norms.push_back(reducer_->reduced_gradient(i).norm());
  auto sq = norms.empty() ? torch::zeros({}, on) : torch::stack(norms).to(torch::kDouble).square().sum();
  if (reducer_->zero_stage() > 0) sq = sq * grid_->dp().size();
  const auto both = torch::stack({loss.defined() ? loss.to(torch::kDouble) : torch::zeros({}, on), sq}).cpu();
  return {both[0].item<double>(), both[1].item<double>()};
}

// debug.nonfinite = grad: an Inf in the first gradient element this rank holds after the exchange, which
// the global finite check must catch on every rank.
void Trainer::poison_gradient() {
  for (std::size_t i = 0; i < model_->parameters().size(); ++i)
    if (auto g = reducer_->reduced_gradient(i); g.numel() > 0) {
      g.view(-1)[0].fill_(INFINITY);
      return;
    }
}

Verdict Trainer::train_step(long long s, double lr) {
  Axis& tp = grid_->tp();
  const std::uint64_t tp_bytes = tp.bytes_sent(), pp_bytes = engine_->bytes_sent();
  const double tp_wait = tp.wait_s();
  reducer_->zero_grad(optimizer_->owns_communication());
  timer_.stamp();
  torch::Tensor batch;  // (rows, width): this dp rank's samples of the step (first and last stage)
  if (model_->first_stage() || model_->last_stage()) batch = windows_->get(sample_index_);  // asks for the next ones
  timer_.stamp(Section::Data);
  StepReport mine;
  torch::Tensor loss;  // last stage: the step's mean loss, on the device
  std::vector<torch::Tensor> before;  // the batch-norm statistics before this step's forwards
  try {
    const int elem = static_cast<int>(torch::elementSize(compute_dtype(cfg_.precision.type)));
    const double state = cfg_.debug.alloc_limit_mb > 0 ? state_bytes().peak() : 0.0;
    if (faults_.over_memory_budget(model_->plan().activation_bytes(guard_->micro_batch(), elem) + state, grid_->all()))
      throw std::bad_alloc();
    const SyncCheck no_sync(cfg_.debug.sync_check);
    auto windows = [&](std::int64_t first, int rows) { return model_->split(batch.narrow(0, first, rows)); };
    before = clone_replica_state();
    loss = engine_->train(guard_->accumulation(), guard_->micro_batch(), windows, stage_forward(s), *reducer_,
                          guard_->loss_scale());
  } catch (const std::bad_alloc&) {
    mine.oom = true;
  } catch (const c10::OutOfMemoryError&) {
    mine.oom = true;
  }
  timer_.stamp(Section::Compute);  // what an out-of-memory error cut short
  timer_.move(Section::Compute, Section::TpComm, tp.wait_s() - tp_wait);
  // The exchanges run even after an out-of-memory error, so that every rank issues the same
  // collectives; the step is then retried.
  reducer_->finish();
  if (faults_.inf_gradient(s)) poison_gradient();
  timer_.stamp(Section::DpComm);
  engine_->sum_tied_gradient(tied_ < 0 ? torch::Tensor() : reducer_->reduced_gradient(static_cast<std::size_t>(tied_)));
  timer_.stamp(Section::PpComm);
  mine.counts_loss = model_->last_stage() && tp.rank() == 0;  // one rank per replica
  std::tie(mine.loss, mine.grad_sq) = loss_and_grad_sq(loss);
  const Verdict v = guard_->judge(s, mine, reducer_->exchange() == GradExchange::Local);
  timer_.stamp(Section::DpComm);
  bytes_sent_[1] += tp.bytes_sent() - tp_bytes;  // training traffic only, not validation
  bytes_sent_[2] += engine_->bytes_sent() - pp_bytes;
  if (v.action == Verdict::Action::Update) {
    const SyncCheck no_sync(cfg_.debug.sync_check);
    if (v.grad_factor != 1.0) reducer_->scale(v.grad_factor);  // unscale and clip in one pass
    optimizer_->step(lr);
    reducer_->gather_parameters();  // ZeRO: every rank's updated shard to every rank
  }
  if (v.action == Verdict::Action::Update) average_replica_state();
  else restore_replica_state(before);  // a skipped or retried step leaves no trace in them either
  timer_.stamp(Section::Optim);
  return v;
}

RunResult Trainer::run() {
  RunResult r;
  const long long steps = cfg_.train.steps;
  if (start_step_ >= steps) {
    log_.print("Nothing to run: the checkpoint is at step " + std::to_string(start_step_) + " and train.steps = " +
               std::to_string(steps) + "\n");
    return r;
  }
  const ModelPlan& m = model_->plan();
  Thermo thermo(log_, cfg_.output.dir + "/metrics.jsonl", start_step_, m.item(), model_->classifier());
  double peak = peak_gflops_ * 1e9;  // FLOP/s summed over ranks
  grid_->all().blocking_sum(&peak, 1, "peak FLOP/s");
  const double items_per_step = static_cast<double>(cfg_.train.global_batch) * static_cast<double>(m.items_per_sample());
  Throughput throughput(items_per_step, m.flops_per_item() * items_per_step, peak);
  timer_.reset();
  for (long long s = start_step_; s < steps; ++s) {
    faults_.stall(s);
    const double lr = schedule_(s);
    const Verdict v = train_step(s, lr);
    if (v.action == Verdict::Action::Retry) {  // out of memory, backed off: the same step again
      --s;
      continue;
    }
    const std::uint64_t step_bytes = reducer_->bytes_sent() + optimizer_->bytes_sent();
    bytes_sent_[0] += step_bytes;
    sample_index_ += static_cast<std::uint64_t>(cfg_.train.global_batch);
    r.losses.push_back(v.loss);
    r.grad_norms.push_back(v.norm);
    throughput.step();

    const bool last = s + 1 == steps;
    std::optional<Validation> val;
    if (last || (cfg_.train.eval_interval > 0 && (s + 1) % cfg_.train.eval_interval == 0)) {
      const Stopwatch eval;
      val = evaluate();
      throughput.exclude(eval.seconds());
      timer_.stamp(Section::Eval);
    }
    if (last || s == 0 || (s + 1) % cfg_.output.thermo == 0 || val) {
      const auto rate = throughput.interval();
      thermo.write({s + 1, v.loss, val ? std::optional(val->loss) : std::nullopt, val ? val->accuracy : std::nullopt,
                    lr, v.norm, rate.items_per_s, rate.step_ms, rate.mfu, step_bytes, guard_->loss_scale(),
                    guard_->skipped_nonfinite() + guard_->skipped_outliers()});
      timer_.stamp(Section::Output);
    }
    if (last && val) {
      r.final_val_loss = val->loss;
      r.final_val_accuracy = val->accuracy;
    }

    const int sig = agree_stop_signal(grid_->all());
    const bool stop = sig != 0 && !last;  // a signal on the last step changes nothing: the run is complete
    if (checkpointer_->due(s + 1) || (stop && checkpointer_->enabled())) {
      const WholeParameters whole(*reducer_);  // ZeRO stage 3
      checkpointer_->save(s + 1, sample_index_, samples_->epoch(sample_index_), *model_, *optimizer_,
                          guard_->state());
    }
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
  finish(r, throughput);
  return r;
}

StateBytes Trainer::state_bytes() {
  StateBytes b;
  if (reducer_->zero_stage() == 0) {  // the model's own tensors hold the parameters
    for (const auto& p : model_->parameters()) b.params += static_cast<double>(p.nbytes());
    b.params_peak = b.params;
  } else {
    b.params = static_cast<double>(reducer_->parameter_bytes());
    b.params_peak = static_cast<double>(reducer_->parameter_peak_bytes());
  }
  b.grads = static_cast<double>(reducer_->gradient_bytes());
  b.grads_peak = static_cast<double>(reducer_->gradient_peak_bytes());
  for (const auto& st : optimizer_->state()) b.optimizer += static_cast<double>(st.param.nbytes());
  for (const auto& [name, t] : optimizer_->rank_state()) b.optimizer += static_cast<double>(t.nbytes());
  return b;
}

void Trainer::finish(RunResult& r, const Throughput& throughput) {
  r.loop_s = timer_.loop_seconds();
  const auto rate = throughput.over(static_cast<long long>(r.losses.size()), r.loop_s);
  r.items_per_s = rate.items_per_s;
  r.mfu = rate.mfu;
  r.skipped = guard_->skipped_nonfinite() + guard_->skipped_outliers();
  r.loss_scale = guard_->loss_scale();
  const ModelPlan& m = model_->plan();
  const RunCounters counters{peak_gflops_, peak_source_, bytes_sent_, cuda_device_, val_total_, state_bytes(), m.item(),
                             static_cast<double>(m.items_per_sample())};
  print_summary(r, counters, cfg_, timer_, *reducer_, *checkpointer_, *guard_, *grid_, log_);
}

}  // namespace gridtrain
