// The Trainer's reports, apart from its loop (as LAMMPS keeps Finish::end apart from
// Verlet::run): the setup lines before the first step, the memory accountant, the thermo rows,
// and the counters the end-of-run summary (output/summary.hpp) prints.
#include "gridtrain/app/trainer.hpp"

#include "gridtrain/output/rank_stats.hpp"
#include "gridtrain/output/summary.hpp"
#include "gridtrain/util/memory.hpp"

namespace gridtrain {

void Trainer::describe_setup() const {
  const ModelPlan& m = model_->plan();
  const std::string per = plan_.virtual_stages > 1 ? "virtual stage (" + std::to_string(plan_.virtual_stages) +
                                                          " chunks per rank, interleaved)" : "stage";
  const std::string layers = "; layers per " + per + " " + show_key(cfg_, "grid.stage_layers") + " = " +
                             comma_list(plan_.stage_layers);
  const char* sp = plan_.sequence_parallel ? ", sequence parallel over tp" : "";
  log_.print(grid_->describe() + sp + ", device " + device_.str() + (plan_.shape.pp > 1 ? layers : "") + "\n");
  log_.print("Model: " + model_->describe() + ", " + fmt("%.4g", m.flops_per_item()) + " FLOPs/" + m.item() + " (" +
             m.flops_formula() + "); parameters per rank " +
             min_avg_max(static_cast<double>(count_parameters(*model_)), grid_->world()) + "\n");
  log_.print("Data: " + samples_->describe() + "\n");
  if (const auto sets = samples_->datasets(); sets.size() > 1) {
    std::string legend;
    for (std::size_t i = 0; i < sets.size(); ++i)
      legend += (i ? ", " : "") + std::string("Val") + std::to_string(i + 1) + " = " + sets[i].name;
    log_.print("Validation: each dataset's loss (" + legend + "); ValLoss is their weighted mean\n");
  }
  if (const auto& d = cfg_.data; d.documents()) {
    std::string rules;
    for (const auto& [on, what] : {std::pair{d.reset_position_ids, "positions restart"},
                                   {d.document_mask, "attention within the document"},
                                   {d.eod_mask_loss, "no loss on the prediction from it"}})
      if (on) rules += std::string(rules.empty() ? "" : ", ") + what;
    log_.print("Documents: end at eod " + std::to_string(samples_->shape().eod_token) + "; " + rules + "\n");
  }
  log_.print("Batch: global " + std::to_string(cfg_.train.global_batch) + " = micro " +
             std::to_string(cfg_.train.micro_batch) + " x dp " + std::to_string(plan_.shape.dp) + " x accumulation " +
             std::to_string(plan_.accumulation) + " " + m.samples() + "; " +
             std::to_string(stack_->groups().bucket_count()) + " gradient bucket(s)\n");
  log_.print("LR: peak " + fmt("%.4g", lr_schedule_.peak()) + ", lr(0) = " + fmt("%.4g", lr_schedule_(0)) + "\n");
  const std::string weights = masters() ? std::string(name_of(cfg_.precision.weights)) + " weights and gradients, fp32 "
                                         "master weights and optimizer state" : "fp32 weights and optimizer state";
  log_.print(std::string("Precision: ") + name_of(cfg_.precision.type) + " compute, " + weights +
             (guard_->scaling() ? ", dynamic loss scale from " + fmt("%g", guard_->loss_scale()) : "") + "\n");
  fixes_.describe(log_);
  for (const auto& w : plan_.warnings) log_.warn(w);
}

StateBytes Trainer::state_bytes() {
  StateBytes b;
  const ParameterGroups& g = stack_->groups();
  b.params = static_cast<double>(g.parameter_bytes());
  b.params_peak = static_cast<double>(g.parameter_peak_bytes());
  b.grads = static_cast<double>(g.gradient_bytes());
  b.grads_peak = static_cast<double>(g.gradient_peak_bytes());
  for (const auto& st : optimizer_->state()) b.optimizer += static_cast<double>(st.param.nbytes());
  for (const auto& [name, t] : optimizer_->rank_state()) b.optimizer += static_cast<double>(t.nbytes());
  b.optimizer += static_cast<double>(stack_->master_bytes());  // sharded with the optimizer state
  b.fixes = fixes_.state_bytes();
  return b;
}

ThermoRow Trainer::thermo_row(long long step, double lr, const Verdict& v, const std::optional<Validation::Result>& val,
                              std::uint64_t step_bytes, const Throughput::Rate& rate) {
  ThermoRow row{.step = step,
                .loss = v.loss,
                .val_loss = val ? std::optional(val->loss) : std::nullopt,
                .val_accuracy = val ? val->accuracy : std::nullopt,
                .val_datasets = val ? val->per_dataset : std::vector<double>{},
                .lr = lr,
                .grad_norm = v.norm,
                .items_per_s = rate.items_per_s,
                .step_ms = rate.step_ms,
                .mfu = rate.mfu,
                .comm_bytes = step_bytes,
                .loss_scale = guard_->loss_scale(),
                .skipped = guard_->skipped_nonfinite() + guard_->skipped_outliers(),
                .items_seen = sample_index_ * static_cast<std::uint64_t>(model_->plan().items_per_sample()),
                .elapsed_s = timer_.loop_seconds(),
                .remaining_s = remaining_.seconds_for(cfg_.train.steps - step)};
  if (const long long next = checkpointer_->next_due(step); next > 0)
    row.checkpoint_in_s = remaining_.seconds_for(next - step);
  row.section_ms = section_rates_.per_step_ms(timer_, step - thermo_step_);
  const auto ms = [&row](Section s) { return row.section_ms[static_cast<std::size_t>(s)]; };
  row.checkpoint_s = timer_.seconds(Section::Checkpoint);
  row.eval_s = timer_.seconds(Section::Eval);
  row.busy = stragglers_->observe(step, ms(Section::Data) + ms(Section::Compute) + ms(Section::Optim));
  thermo_step_ = step;
  row.state_mib = state_bytes().total() / (1024.0 * 1024.0);
  row.peak_rss_mib = peak_rss_bytes() / (1024.0 * 1024.0);
  row.fixes = fixes_.columns();
  return row;
}

void Trainer::finish(RunResult& r, const Throughput& throughput, const Thermo& thermo) {
  r.loop_s = timer_.loop_seconds();
  const auto rate = throughput.over(static_cast<long long>(r.losses.size()), r.loop_s);
  r.items_per_s = rate.items_per_s;
  r.mfu = rate.mfu;
  r.skipped = guard_->skipped_nonfinite() + guard_->skipped_outliers();
  r.loss_scale = guard_->loss_scale();
  const ModelPlan& m = model_->plan();
  RunCounters counters{peak_gflops_, peak_source_, traffic_->total(), cuda_device_, validation_->samples(),
                       state_bytes(), m.item(), static_cast<double>(m.items_per_sample())};
  counters.fixes = fixes_.summary(m.item());
  const Goodput goodput = thermo.goodput(r.loop_s, timer_.seconds(Section::Checkpoint), timer_.seconds(Section::Eval));
  counters.fixes.push_back({goodput_table(goodput), "goodput", goodput_json(goodput)});
  const auto& passes = engine_->pass_seconds();
  counters.pass_s = {passes.forward, passes.input, passes.weight, static_cast<double>(passes.micro_batches)};
  print_summary({r, counters, cfg_, timer_, stack_->groups(), *checkpointer_, *guard_, *grid_}, log_);
}

}  // namespace gridtrain
