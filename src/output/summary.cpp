#include "gridtrain/output/summary.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "gridtrain/output/rank_stats.hpp"
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
  log.print("Performance: " + fmt("%.1f", run.tokens_per_s) + " " + items + "/s, " +
            fmt("%.2f", run.tokens_per_s / counters.items_per_sample) + " samples/s, " + fmt("%.2f", 100.0 * run.mfu) +
            "% MFU (peak " + fmt("%.1f", counters.peak_gflops) + " GFLOP/s per rank: " + counters.peak_source + ")\n");
}

// What the reducer actually did, not what the deck asked for (compression disables overlap;
// 1-bit Adam keeps gradients local after its freeze).
void print_exchange(const RunCounters& counters, long long steps, const Reducer& reducer, Grid& grid, Log& log) {
  Axis& dp = grid.dp();
  if (dp.size() > 1) {
    const ExchangeStats& st = reducer.stats();
    double s[2] = {st.in_flight_s, st.exposed_s};
    dp.blocking_sum(s, 2, "gradient exchange times");
    std::string kinds;
    for (std::size_t k = 0; k < st.steps.size(); ++k)
      if (st.steps[k] > 0)
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(st.steps[k]) + " step(s) " +
                 describe(static_cast<GradExchange>(k));
    log.print("\nGradient exchange (dp, avg over ranks): " + fmt("%.3f", s[0] / dp.size()) + " s in flight, " +
              fmt("%.3f", s[1] / dp.size()) + " s exposed; " + kinds + "; " +
              std::to_string(reducer.bucket_count()) + " buckets" +
              (reducer.zero_stage() > 0
                   ? "; ZeRO stage " + std::to_string(reducer.zero_stage()) +
                         ": reduce-scatter in place of the allreduce, " +
                         (reducer.zero_stage() == 3 ? "each layer all-gathered before its forward and its backward"
                                                    : "all-gather after the update")
                   : "") +
              "\n");
  }
  double bytes[3];
  for (std::size_t i = 0; i < 3; ++i) bytes[i] = static_cast<double>(counters.bytes_sent[i]);
  grid.all().blocking_sum(bytes, 3, "bytes sent");
  const double per = static_cast<double>(grid.shape().size()) * static_cast<double>(std::max(1LL, steps));
  log.print("Bytes sent per training step and rank (avg over ranks): dp " + fmt("%.0f", bytes[0] / per) + ", tp " +
            fmt("%.0f", bytes[1] / per) + ", pp " + fmt("%.0f", bytes[2] / per) + "\n");
}

void print_stability(const Config& c, const Checkpointer& ck, const StepGuard& guard, Log& log) {
  if (ck.saves() > 0)
    log.print("\nCheckpoints: " + std::to_string(ck.saves()) + " written to " + c.checkpoint.dir +
              ", step-loop stall " + fmt("%.3f", ck.stall_s()) + " s, write " + fmt("%.3f", ck.write_s()) +
              (c.checkpoint.async ? " s (background)" : " s") + ", waiting for the last write at exit " +
              fmt("%.3f", ck.drain_s()) + " s\n");
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

void print_memory(const RunCounters& counters, Grid& grid, Log& log) {
  const StateBytes& s = counters.state;
  double v[5] = {s.params, s.params_peak, s.grads, s.grads_peak, s.optimizer};
  grid.all().blocking_max(v, 5, "model state bytes");
  char text[400];
  std::snprintf(text, sizeof text,
                "\nModel state per rank, MiB, max over ranks (the tensors the model, gradient reducer and optimizer "
                "hold):\n%-17s %10s %10s\n%-17s %10.3f %10.3f\n%-17s %10.3f %10.3f\n%-17s %10.3f %10.3f\n",
                "", "at the end", "peak", "parameters", v[0] / kMiB, v[1] / kMiB, "gradients", v[2] / kMiB,
                v[3] / kMiB, "optimizer state", v[4] / kMiB, v[4] / kMiB);
  log.print(text);
  log.print("Memory: peak RSS " + min_avg_max(peak_rss_bytes(), grid.all(), kMiB, "MiB") + "\n");
  const int cuda_device = counters.cuda_device;
#ifdef GRIDTRAIN_CUDA
  if (cuda_device >= 0) {  // the same on every rank: train.device is one setting
    const auto cuda = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(cuda_device));
    const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    log.print("CUDA memory: peak allocated " +
              min_avg_max(static_cast<double>(cuda.allocated_bytes[all].peak), grid.all(), kMiB, "MiB") +
              "; peak reserved by the caching allocator " +
              min_avg_max(static_cast<double>(cuda.reserved_bytes[all].peak), grid.all(), kMiB, "MiB") + "\n");
  }
#else
  (void)cuda_device;
#endif
}

}  // namespace

Throughput::Throughput(double tokens_per_step, double flops_per_step, double peak_flops)
    : tokens_per_step_(tokens_per_step), flops_per_step_(flops_per_step), peak_flops_(peak_flops) {}

Throughput::Rate Throughput::over(long long steps, double seconds) const {
  const double n = static_cast<double>(steps);
  if (steps == 0 || seconds <= 0) return {};
  return {tokens_per_step_ * n / seconds, 1e3 * seconds / n, flops_per_step_ * n / seconds / peak_flops_};
}

Throughput::Rate Throughput::interval() {
  const Rate r = over(interval_steps_, interval_.seconds() - excluded_s_);
  interval_.restart();
  interval_steps_ = 0;
  excluded_s_ = 0;
  return r;
}

void print_summary(const RunResult& run, const RunCounters& counters, const Config& c, const Timer& timer,
                   const Reducer& reducer, const Checkpointer& checkpointer, const StepGuard& guard, Grid& grid,
                   Log& log) {
  print_performance(run, counters, c, grid, log);
  const Breakdown b = reduce_breakdown(timer, run.loop_s, grid.all());
  log.print(format_breakdown(b.rows, b.other_avg_s, b.loop_avg_s));
  print_exchange(counters, static_cast<long long>(run.losses.size()), reducer, grid, log);
  print_stability(c, checkpointer, guard, log);
  print_memory(counters, grid, log);
  const std::string per = "/" + counters.item;
  if (run.final_val_loss)
    log.print("\nFinal validation loss: " + fmt("%.4f", *run.final_val_loss) + " nats" + per + " (" +
              fmt("%.4f", *run.final_val_loss / std::log(2.0)) + " bits" + per + ") over " +
              std::to_string(counters.val_windows) + (counters.item == "token" ? " windows\n" : " samples\n"));
  if (run.final_val_accuracy)
    log.print("Final validation accuracy: " + fmt("%.4f", *run.final_val_accuracy) + " (top-1) over " +
              std::to_string(counters.val_windows) + " samples\n");
}

}  // namespace gridtrain
