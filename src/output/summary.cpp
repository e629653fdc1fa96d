#include "gridtrain/output/summary.hpp"

#include <array>
#include <utility>
#include <cmath>
#include <cstdio>
#include <string>

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/output/rank_stats.hpp"
#include "gridtrain/parallel/parameter_groups.hpp"
#include "gridtrain/precision/step_guard.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/util/files.hpp"
#include "gridtrain/util/memory.hpp"

namespace gridtrain {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

void print_performance(const RunResult& run, const RunCounters& counters, const Config& c, Grid& grid, Log& log) {
  const auto steps = static_cast<long long>(run.losses.size());
  const std::string items = counters.item + "s";
  const double n = static_cast<double>(steps) * c.train.global_batch * counters.items_per_sample;
  log.print("\nLoop time of " + fmt("%.6g", run.loop_s) + " on " + std::to_string(grid.shape().size()) +
            " procs for " + std::to_string(steps) + " steps with " + fmt("%.0f", n) + " " + items + "\n\n");
  log.print("Performance: " + fmt("%.1f", run.items_per_s) + " " + items + "/s, " +
            fmt("%.2f", run.items_per_s / counters.items_per_sample) + " samples/s, " + fmt("%.2f", 100.0 * run.mfu) +
            "% MFU (peak " + fmt("%.1f", counters.peak_gflops) + " GFLOP/s per rank: " + counters.peak_source + ")\n");
}

// Bytes sent per training step and rank on each axis (averages over ranks).
PerAxis<double> bytes_per_step(const RunCounters& counters, long long steps, Grid& grid) {
  PerAxis<double> bytes{};
  for (std::size_t i = 0; i < kAxisCount; ++i) bytes[i] = static_cast<double>(counters.bytes_sent.at(i));
  grid.world().blocking_sum(bytes.data(), static_cast<int>(kAxisCount), "bytes sent");
  const double per = static_cast<double>(grid.shape().size()) * static_cast<double>(std::max(1LL, steps));
  for (auto& b : bytes) b /= per;
  return bytes;
}

// What each group's reducer actually did, not what the deck asked for (compression disables
// overlap; 1-bit Adam keeps gradients local after its freeze). The group is named when there are
// several.
void print_exchange(const PerAxis<double>& bytes, const ParameterGroups& groups, Log& log) {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Axis& axis = *groups.spec(g).axis;
    const Reducer& reducer = groups.group(g).reducer();
    if (axis.size() == 1) continue;
    const ExchangeStats& st = reducer.stats();
    double s[2] = {st.in_flight_s, st.exposed_s};
    axis.blocking_sum(s, 2, "gradient exchange times");
    std::string kinds;
    for (std::size_t k = 0; k < st.steps.size(); ++k)
      if (st.steps[k] > 0)
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(st.steps[k]) + " step(s) " +
                 describe(static_cast<GradExchange>(k));
    const std::string which = groups.size() > 1 ? " of the " + groups.spec(g).name + " parameters" : "";
    log.print("\nGradient exchange" + which + " (" + axis.name() + ", avg over ranks): " +
              fmt("%.3f", s[0] / axis.size()) + " s in flight, " + fmt("%.3f", s[1] / axis.size()) + " s exposed; " +
              kinds + "; " + std::to_string(reducer.bucket_count()) + " buckets of " + reducer.gradient_dtype() +
              " gradients" +
              (reducer.zero_stage() > 0
                   ? "; ZeRO stage " + std::to_string(reducer.zero_stage()) +
                         ": reduce-scatter in place of the allreduce, " +
                         (reducer.zero_stage() == 3 ? "each layer all-gathered before its forward and its backward"
                                                    : "all-gather after the update")
                   : "") +
              "\n");
  }
  std::string per_axis;
  for (const AxisInfo& a : kAxes) per_axis += (per_axis.empty() ? "" : ", ") + (a.name + (" " + fmt("%.0f", bytes[index_of(a.id)])));
  log.print("Bytes sent per training step and rank (avg over ranks): " + per_axis + "\n");
}

// <output.dir>/summary.json: the numbers of the report for scripts (scripts/scaling), one object.
std::string summary_json(const RunResult& run, const RunCounters& counters, const Config& c, const Breakdown& b,
                         const PerAxis<double>& bytes, int micro_batch, Grid& grid) {
  const GridShape& g = grid.shape();
  const auto steps = static_cast<long long>(run.losses.size());
  auto num = [](double v) { return std::isfinite(v) ? fmt("%.9g", v) : std::string("null"); };
  auto quoted = [](const std::string& text) {  // a JSON string (RFC 8259 §7)
    std::string q = "\"";
    for (const char ch : text) {
      if (ch == '"' || ch == '\\') {
        q += '\\';
        q += ch;
      } else if (static_cast<unsigned char>(ch) < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(ch));
        q += escaped;
      } else {
        q += ch;
      }
    }
    return q + "\"";
  };
  std::string sections;
  for (const auto& row : b.rows) sections += "\"" + row.name + "\": " + num(row.avg_s) + ", ";
  sections += "\"Other\": " + num(b.other_avg_s);
  std::string sizes, axis_bytes;
  for (const AxisInfo& a : kAxes) {
    sizes += ", \"" + std::string(a.name) + "\": " + std::to_string(g[a.id]);
    axis_bytes += (axis_bytes.empty() ? "\"" : ", \"") + std::string(a.name) + "\": " + num(bytes[index_of(a.id)]);
  }
  std::string out = "{\"deck\": " + quoted(c.deck_name) + ", \"model\": \"" + name_of(c.model.type) + "\", \"ranks\": " +
                    std::to_string(g.size()) + sizes + ", \"zero_stage\": " +
                    std::to_string(c.optim.zero_stage) + ", \"global_batch\": " + std::to_string(c.train.global_batch) +
                    ", \"micro_batch\": " + std::to_string(micro_batch) + ", \"steps\": " +
                    std::to_string(steps) + ", \"train_steps\": " + std::to_string(c.train.steps) +
                    ", \"stop_signal\": " + std::to_string(run.stop_signal) + ", \"loop_s\": " + num(run.loop_s) + ", \"step_s\": " +
                    num(steps > 0 ? run.loop_s / static_cast<double>(steps) : 0.0) + ", \"item\": \"" + counters.item +
                    "\", \"items_per_s\": " + num(run.items_per_s) + ", \"mfu\": " + num(run.mfu) +
                    ", \"peak_gflops_per_rank\": " + num(counters.peak_gflops) + ", \"sections_s\": {" + sections +
                    "}, \"bytes_per_step\": {" + axis_bytes + "}";
  if (run.final_val_loss) out += ", \"final_val_loss\": " + num(*run.final_val_loss);
  if (run.final_val_accuracy) out += ", \"final_val_accuracy\": " + num(*run.final_val_accuracy);
  for (const auto& f : counters.fixes) out += ", \"" + f.json_key + "\": " + f.json;
  return out + "}\n";
}

void print_stability(const Config& c, const Checkpointer& ck, const StepGuard& guard, Log& log) {
  if (ck.saves() > 0)
    log.print("\nCheckpoints: " + std::to_string(ck.saves()) + " written to " + c.checkpoint.dir +
              ", step-loop stall " + fmt("%.3f", ck.stall_s()) + " s, write " + fmt("%.3f", ck.write_s()) +
              (c.checkpoint.async ? " s (background)" : " s") + ", waiting for the last write at exit " +
              fmt("%.3f", ck.drain_s()) + " s\n");
  if (ck.local_saves() > 0)
    log.print("Local checkpoints: " + std::to_string(ck.local_saves()) + " steps written to checkpoint.local_dir" +
              (ck.partner_rank(0) >= 0 ? " with partner copies" : "") + ", write " + fmt("%.3f", ck.local_write_s()) +
              (c.checkpoint.async ? " s (background)" : " s") + " (the step-loop stall above includes their copy)\n");
  const long long skipped = guard.skipped_nonfinite() + guard.skipped_outliers();
  log.print("\nStability: " + std::to_string(skipped) + " update(s) skipped (" +
            std::to_string(guard.skipped_nonfinite()) + " non-finite, " + std::to_string(guard.skipped_outliers()) +
            " outlier)" + (guard.scaling() ? ", loss scale " + fmt("%g", guard.loss_scale()) : "") +
            (guard.oom_backoffs() ? ", " + std::to_string(guard.oom_backoffs()) +
                                        " out-of-memory backoff(s) to train.micro_batch = " +
                                        std::to_string(guard.micro_batch())
                                  : "") +
            "\n");
}

// zb-h1's bubble over the ideal step (zb_h1_bubble_ratio) from the mean seconds per micro-batch
// over the ranks of F, B and W (pass: this rank's PassSeconds), and the formula with them.
std::pair<double, std::string> zb_h1_bubble(std::array<double, 4> pass, int p, int m, Grid& grid) {
  grid.world().blocking_sum(pass.data(), 4, "pass seconds");
  const double n = std::max(pass[3], 1.0), F = pass[0] / n, B = pass[1] / n, W = pass[2] / n;
  return {zb_h1_bubble_ratio(p, m, F + B + W > 0 ? W / (F + B + W) : 0.0),
          "(p - 1)(F + B - 2W) with F, B, W = " + fmt("%.3g", 1e3 * F) + ", " + fmt("%.3g", 1e3 * B) + ", " +
              fmt("%.3g", 1e3 * W) + " ms per micro-batch measured"};
}

// The pipeline's bubble: the PP comm section's share of the pipeline phase (Data + Compute + PP
// comm, averaged over ranks) against the schedule's share of the step: (p − 1)/(v·m + p − 1),
// or zb-h1's.
void print_pipeline(const Config& c, const Breakdown& b, int micro_batch, const RunCounters& counters, Grid& grid,
                    Log& log) {
  const GridShape& g = grid.shape();
  if (g.pp < 2) return;
  auto avg = [&](Section s) { return b.rows[static_cast<std::size_t>(s)].avg_s; };
  const double phase = avg(Section::Data) + avg(Section::Compute) + avg(Section::PpComm);
  const int m = static_cast<int>(c.train.global_batch / (static_cast<long long>(micro_batch) * g.dp));
  const int v = c.train.schedule == PipelineSchedule::Interleaved ? c.grid.virtual_stages : 1;
  const auto [ratio, formula] = c.train.schedule == PipelineSchedule::ZbH1
                                    ? zb_h1_bubble(counters.pass_s, g.pp, m, grid)
                                    : std::pair{bubble_ratio(g.pp, m, v), std::string("(p - 1)/(v·m + p - 1)")};
  log.print("\nPipeline: " + std::string(name_of(c.train.schedule)) +
            (v > 1 ? ", " + std::to_string(v) + " chunks per rank" : "") + ", " + std::to_string(m) +
            " micro-batches over " + std::to_string(g.pp) + " stages; bubble (PP comm / (Data + Compute + PP comm)) " +
            fmt("%.3f", phase > 0 ? avg(Section::PpComm) / phase : 0.0) + " measured, " +
            fmt("%.3f", ratio / (1.0 + ratio)) + " by the schedule's " + formula + "\n");
}

void print_memory(const RunCounters& counters, Grid& grid, Log& log) {
  const StateBytes& s = counters.state;
  double v[6] = {s.params, s.params_peak, s.grads, s.grads_peak, s.optimizer, s.fixes};
  grid.world().blocking_max(v, 6, "model state bytes");
  char text[400];
  std::snprintf(text, sizeof text,
                "\nModel state per rank, MiB, max over ranks (the tensors the model, gradient reducer and optimizer "
                "hold):\n%-17s %10s %10s\n%-17s %10.3f %10.3f\n%-17s %10.3f %10.3f\n%-17s %10.3f %10.3f\n",
                "", "at the end", "peak", "parameters", v[0] / kMiB, v[1] / kMiB, "gradients", v[2] / kMiB,
                v[3] / kMiB, "optimizer state", v[4] / kMiB, v[4] / kMiB);
  log.print(text);
  if (v[5] > 0) {
    std::snprintf(text, sizeof text, "%-17s %10.3f %10.3f\n", "step fixes", v[5] / kMiB, v[5] / kMiB);
    log.print(text);
  }
  log.print("Memory: peak RSS " + min_avg_max(peak_rss_bytes(), grid.world(), kMiB, "MiB") + "\n");
  const int cuda_device = counters.cuda_device;
#ifdef GRIDTRAIN_CUDA
  if (cuda_device >= 0) {  // the same on every rank: train.device is one setting
    const auto cuda = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(cuda_device));
    const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    log.print("CUDA memory: peak allocated " +
              min_avg_max(static_cast<double>(cuda.allocated_bytes[all].peak), grid.world(), kMiB, "MiB") +
              "; peak reserved by the caching allocator " +
              min_avg_max(static_cast<double>(cuda.reserved_bytes[all].peak), grid.world(), kMiB, "MiB") + "\n");
  }
#else
  (void)cuda_device;
#endif
}

}  // namespace

Throughput::Throughput(double items_per_step, double flops_per_step, double peak_flops)
    : items_per_step_(items_per_step), flops_per_step_(flops_per_step), peak_flops_(peak_flops) {}

Throughput::Rate Throughput::over(long long steps, double seconds) const {
  const double n = static_cast<double>(steps);
  if (steps == 0 || seconds <= 0) return {};
  return {items_per_step_ * n / seconds, 1e3 * seconds / n, flops_per_step_ * n / seconds / peak_flops_};
}

Throughput::Rate Throughput::interval() {
  const Rate r = over(interval_steps_, interval_.seconds() - excluded_s_);
  interval_.restart();
  interval_steps_ = 0;
  excluded_s_ = 0;
  return r;
}

void print_summary(const SummaryInputs& in, Log& log) {
  const auto& [run, counters, c, timer, groups, checkpointer, guard, grid] = in;
  print_performance(run, counters, c, grid, log);
  const Breakdown b = reduce_breakdown(timer, run.loop_s, grid.world());
  log.print(format_breakdown(b.rows, b.other_avg_s, b.loop_avg_s));
  const auto bytes = bytes_per_step(counters, static_cast<long long>(run.losses.size()), grid);
  print_exchange(bytes, groups, log);
  print_pipeline(c, b, guard.micro_batch(), counters, grid, log);
  print_stability(c, checkpointer, guard, log);
  print_memory(counters, grid, log);
  for (const auto& f : counters.fixes) log.print(f.text);
  const std::string per = "/" + counters.item;
  if (run.final_val_loss)
    log.print("\nFinal validation loss: " + fmt("%.4f", *run.final_val_loss) + " nats" + per + " (" +
              fmt("%.4f", *run.final_val_loss / std::log(2.0)) + " bits" + per + ") over " +
              std::to_string(counters.val_samples) + " samples\n");
  if (run.final_val_accuracy)
    log.print("Final validation accuracy: " + fmt("%.4f", *run.final_val_accuracy) + " (top-1) over " +
              std::to_string(counters.val_samples) + " samples\n");
  const std::string json = summary_json(run, counters, c, b, bytes, guard.micro_batch(), grid);
  if (log.active()) replace_file(c.output.dir + "/summary.json", json);
}

}  // namespace gridtrain
