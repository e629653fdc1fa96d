#include "gridtrain/app/trainer.hpp"

#include <algorithm>
#include <new>
#include <tuple>
#include <utility>

#include "gridtrain/app/sync_check.hpp"
#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/model/registry.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/plan/peak.hpp"
#include "gridtrain/precision/autocast.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

Trainer::Trainer(const Config& cfg, MPI_Comm world, Log& log, double peak_gflops, std::string peak_source)
    : cfg_(cfg), log_(log), peak_gflops_(peak_gflops), peak_source_(std::move(peak_source)),
      plan_(plan_launch(cfg, [world] { int n = 1; MPI_Comm_size(world, &n); return n; }())),
      grid_(std::make_unique<Grid>(world, plan_.shape, cfg.comm.timeout_s)), lr_schedule_(cfg) {
  // From here on cfg_, the Trainer's own copy: the parts keep references to it.
  cuda_device_ = place_rank(plan_, cfg_, *grid_);
  if (cuda_device_ >= 0) device_ = {torch::kCUDA, static_cast<torch::DeviceIndex>(cuda_device_)};
  if (cuda_device_ >= 0 && cfg_.output.timer == TimerMode::Sync) timer_.set_sync(synchronize_device);
  if (peak_gflops_ <= 0) {  // now that this rank has its device
    const Peak peak = rank_peak(cfg_, cuda_device_ >= 0);
    peak_gflops_ = peak.gflops;
    peak_source_ = peak.source;
    log_.print("Peak: " + fmt("%.1f", peak_gflops_) + " GFLOP/s per rank (" + peak_source_ + ", rank 0)\n");
  }
  load_data();
  checkpointer_ = std::make_unique<Checkpointer>(cfg_, *grid_, log_, samples_->id());
  build_model();
  guard_ = std::make_unique<StepGuard>(cfg_, grid_->world(), plan_.shape.replicas(), cfg_.train.micro_batch,
                                       plan_.accumulation, log_);
  describe_setup();
  stragglers_ = std::make_unique<StragglerWatch>(grid_->world(), cfg_.output.straggler_factor, log_);
  // ZeRO stage 3 loads each rank's pieces straight into its shards: nothing is gathered.
  const Stopwatch resume;
  if (auto path = checkpointer_->resume_path(*model_, *optimizer_)) {
    const ResumePoint at = checkpointer_->load(*path, *model_, *optimizer_);
    log_.print("Resume: chosen, verified and loaded in " + fmt("%.3f", resume.seconds()) + " s\n");
    start_step_ = thermo_step_ = at.step;
    sample_index_ = at.sample_index;
    guard_->restore(at.train);
    samples_->restore(at.train, at.sample_index);
    stack_->publish();
  } else if (cfg_.checkpoint.init_from != "none") {
    checkpointer_->load_weights(cfg_.checkpoint.init_from, *model_, *optimizer_);
    stack_->publish();
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
  batches_ = std::make_unique<BatchPrefetcher>(rows, samples_->width(), device_, fill, cfg_.data.prefetch,
                                                static_cast<std::uint64_t>(cfg_.train.global_batch));
  validation_ = std::make_unique<Validation>(cfg_, *samples_, *grid_, log_);
}

void Trainer::build_model() {
  model_ = make_model(cfg_, samples_->shape(), model_layout(plan_, *grid_));
  model_->initialize(cfg_.train.seed);  // on the host, so that every device starts from the same bits
  model_->to(device_);
  std::vector<torch::Tensor> initial;  // precision.weights = bf16 | fp16: the fp32 weights the masters start from
  if (cfg_.precision.weights != PrecisionType::Fp32) {
    for (auto& p : model_->named_parameters(true)) initial.push_back(p.value().detach());
    model_->to(compute_dtype(cfg_.precision.weights));  // the parameters become their 2-byte rounding
  }
  // Gradients average over dp × cp, the experts' (with grid.ep > 1: each rank holds its own) over
  // expert dp, which is within a pipeline stage: a stage without MoE layers has the dense group alone.
  const Model& model = *model_;
  std::vector<ParameterGroup> groups = {{"dense", &grid_->dp_cp()}};
  const auto params = model.named_parameters(true);
  const bool experts = std::any_of(params.begin(), params.end(), [&model](const auto& p) { return model.shard(p.key()).expert; });
  if (grid_->shape().ep > 1 && experts) groups.push_back({"expert", &grid_->expert_dp()});
  const bool split = groups.size() > 1;
  const auto group_of = [&model, split](const std::string& name) {
    return split && model.shard(name).expert ? std::size_t{1} : std::size_t{0};
  };
  stack_ = std::make_unique<ParameterStack>(cfg_, *model_, groups, group_of, grid_->dp_cp(), grid_->tp().rank(), initial);
  const std::vector<NamedParameter>& pieces = stack_->pieces();
  // Saved and loaded as the pieces the optimizer holds (ZeRO stage 3's shards, the masters):
  // nothing is gathered.
  if (parameters().stage() == 3 || masters()) checkpointer_->use_parameter_pieces(pieces);
  optimizer_ = make_optimizer(cfg_, pieces, grid_->dp_cp());
  const auto step_bytes = [this] {  // debug.alloc_limit_mb's figure, once the step guard exists
    const int elem = static_cast<int>(torch::elementSize(compute_dtype(cfg_.precision.type)));
    return model_->plan().activation_bytes(guard_->micro_batch(), elem, 1) + state_bytes().peak();
  };
  fixes_ = Fixes(make_fixes({cfg_, *grid_, *model_, *optimizer_, *checkpointer_, pieces,
                             stack_->pieces_split_over_dp(), step_bytes}));
  const ModelPlan& plan = model_->plan();
  engine_ = std::make_unique<PipelineEngine>(*grid_, cfg_.train.schedule, plan_.virtual_stages,
                                             [&plan](int rows) { return plan.activation_shape(rows); },
                                             stack_->masters() ? compute_dtype(cfg_.precision.weights) : torch::kFloat,
                                             device_, model_->first_stage(), model_->last_stage(), !stack_->tied().empty(),
                                             model_->input_on_every_stage(), model_->carried_width(), timer_);
  // One column per axis; pp's with the tied-embedding pair split off it, dp's with dp × cp.
  std::vector<std::vector<const Axis*>> columns;
  for (const AxisInfo& a : kAxes) columns.push_back({&grid_->axis(a.id)});
  if (const Axis* pair = engine_->tied_axis()) columns[index_of(AxisId::Pp)].push_back(pair);
  if (&grid_->dp_cp() != &grid_->dp()) columns[index_of(AxisId::Dp)].push_back(&grid_->dp_cp());
  traffic_ = std::make_unique<StepTraffic>(std::move(columns));
}

PipelineEngine::Forward Trainer::stage_forward(long long s) {
  return [this, s](const PipelineEngine::Pass& in, const torch::Tensor& input, const torch::Tensor& targets,
                   int chunk) -> PipelineEngine::Pass {
    AutocastGuard autocast(cfg_.precision.type, device_);
    model_->carry_in(in.sums);
    auto y = model_->stage_forward(in.x, chunk, input);
    if (!targets.defined()) return {y, model_->carry_out()};
    return {fixes_.on_loss(s, model_->head_loss_sum(y, targets)), {}};
  };
}

// What the step's loss on this rank is the mean over: its targets' items (with cp its share of
// the sequences), or with data.eod_mask_loss its share of the global batch's counted ones, so
// that every layout divides by the same number (a micro-batch mean, as Megatron's per-micro-batch
// normalization, would weigh tokens by layout). The gradients then average over dp × cp.
double Trainer::step_items(const torch::Tensor& batch) const {
  if (!model_->last_stage()) return 1.0;  // no loss here
  if (!cfg_.data.eod_mask_loss)
    return static_cast<double>(batch.size(0) * model_->plan().items_per_sample() / grid_->shape().cp);
  double n = model_->items(model_->split(batch).second);
  grid_->dp_cp().blocking_sum(&n, 1, "tokens with loss");
  return std::max(n, 1.0) / grid_->dp_cp().size();
}

// {loss, Σ ||g||² over the gradients this rank counts in the norm} to the host: the step's one device→host copy.
std::pair<double, double> Trainer::loss_and_grad_sq(const torch::Tensor& loss) const {
  const auto sq = stack_->gradient_sq(device_);
  const auto both = torch::stack({loss.defined() ? loss.to(torch::kDouble) : torch::zeros_like(sq), sq}).cpu();
  return {both[0].item<double>(), both[1].item<double>()};
}

Verdict Trainer::train_step(long long s, double lr) {
  ParameterGroups& groups = stack_->groups();
  PerAxis<double> waited{};  // each axis's waits so far
  for (const AxisInfo& a : kAxes) waited[index_of(a.id)] = grid_->axis(a.id).wait_s();
  SyncCheck phase(cfg_.debug.sync_check);
  fixes_.step_begin(s);
  groups.zero_grad(optimizer_->owns_communication());
  timer_.stamp();
  torch::Tensor batch;  // (rows, width): this dp rank's samples of the step (where the engine takes them)
  if (model_->first_stage() || model_->last_stage() || model_->input_on_every_stage())
    batch = batches_->get(sample_index_);  // asks for the next ones
  const double items = step_items(batch);
  timer_.stamp(Section::Data);
  StepReport mine;
  torch::Tensor loss;  // last stage: the step's mean loss, on the device
  try {
    fixes_.before_forward(s);
    phase.enter(StepPhase::Forward);
    auto micro_batch = [&](std::int64_t first, int rows) { return model_->split(batch.narrow(0, first, rows)); };
    loss = engine_->train(guard_->accumulation(), guard_->micro_batch(), micro_batch, stage_forward(s),
                          [&groups](bool last) { groups.begin_backward(last); }, items, guard_->loss_scale());
  } catch (const std::bad_alloc&) {
    mine.oom = true;
  } catch (const c10::OutOfMemoryError&) {
    mine.oom = true;
  }
  phase.enter(StepPhase::Host);
  timer_.stamp(Section::Compute);  // what an out-of-memory error cut short
  for (const AxisInfo& a : kAxes)  // waits inside forward/backward are the axis's communication
    if (a.in_compute) timer_.move(Section::Compute, a.comm, grid_->axis(a.id).wait_s() - waited[index_of(a.id)]);
  // The exchanges run even after an out-of-memory error, so that every rank issues the same
  // collectives; the step is then retried.
  groups.finish();
  groups.release_all();  // ZeRO stage 3: units a failed step left gathered
  timer_.stamp(Section::DpComm);
  const std::vector<torch::Tensor> grads = stack_->reduced_gradients();
  std::vector<torch::Tensor> tied;
  for (const auto i : stack_->tied()) tied.push_back(grads[i]);
  engine_->sum_tied_gradients(tied);
  timer_.stamp(Section::PpComm);
  fixes_.after_exchange(s, grads);
  timer_.stamp(Section::Optim);
  mine.counts_loss = model_->last_stage() && grid_->represents({AxisId::Tp});  // one rank per replica
  std::tie(mine.loss, mine.grad_sq) = loss_and_grad_sq(loss);
  const Verdict v = guard_->judge(s, mine, groups.exchange() == GradExchange::Local);
  timer_.stamp(Section::DpComm);
  if (v.action == Verdict::Action::Update) {
    phase.enter(StepPhase::Update);
    stack_->load_gradients(v.grad_factor);
    optimizer_->step(lr);
    phase.enter(StepPhase::Host);
    fixes_.after_update(s);
    phase.enter(StepPhase::Publish);
    stack_->publish();
  } else {
    fixes_.on_skip(s);
  }
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
  std::vector<std::string> datasets;  // a blend's, reported one by one
  if (const auto sets = samples_->datasets(); sets.size() > 1)
    for (const auto& d : sets) datasets.push_back(d.name);
  Thermo thermo(log_, cfg_.output.dir + "/metrics.jsonl", start_step_, m.item(), model_->classifier(),
                cfg_.output.tensorboard ? cfg_.output.dir : "", datasets, since_start_.seconds());
  double peak = peak_gflops_ * 1e9;  // FLOP/s summed over ranks
  grid_->world().blocking_sum(&peak, 1, "peak FLOP/s");
  const double items_per_step = static_cast<double>(cfg_.train.global_batch) * static_cast<double>(m.items_per_sample());
  Throughput throughput(items_per_step, m.flops_per_item() * items_per_step, peak);
  timer_.reset();
  for (long long s = start_step_; s < steps; ++s) {
    const double lr = lr_schedule_(s);
    traffic_->begin();
    const Verdict v = train_step(s, lr);
    const std::uint64_t step_bytes = traffic_->end()[index_of(AxisId::Dp)];  // training traffic only, not validation
    if (v.action == Verdict::Action::Retry) {  // out of memory, backed off: the same step again
      --s;
      continue;
    }
    sample_index_ += static_cast<std::uint64_t>(cfg_.train.global_batch);
    r.losses.push_back(v.loss);
    r.grad_norms.push_back(v.norm);
    throughput.step();

    const bool last = s + 1 == steps;
    std::optional<Validation::Result> val;
    if (last || (cfg_.train.eval_interval > 0 && (s + 1) % cfg_.train.eval_interval == 0)) {
      const Stopwatch eval;
      val = validation_->run(*model_, *engine_, guard_->micro_batch(), device_);
      throughput.exclude(eval.seconds());
      timer_.stamp(Section::Eval);
    }
    remaining_.step_done(timer_.loop_seconds());
    if (last || s == 0 || (s + 1) % cfg_.output.thermo == 0 || val) {
      thermo.write(thermo_row(s + 1, lr, v, val, step_bytes, throughput.interval()));
      timer_.stamp(Section::Output);
    }
    if (last && val) {
      r.final_val_loss = val->loss;
      r.final_val_accuracy = val->accuracy;
      r.final_val_per_dataset = val->per_dataset;
    }

    const int sig = agree_stop_signal(grid_->world());
    const bool stop = sig != 0 && !last;  // a signal on the last step changes nothing: the run is complete
    if (checkpointer_->due(s + 1) || (stop && checkpointer_->enabled())) {
      TrainState state = guard_->state();
      for (auto& entry : samples_->state()) state.push_back(std::move(entry));
      checkpointer_->save(s + 1, sample_index_, samples_->epoch(sample_index_), *model_, *optimizer_, state, stop);
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
  finish(r, throughput, thermo);
  return r;
}

}  // namespace gridtrain
