#include "gridtrain/output/thermo.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "gridtrain/util/files.hpp"

namespace gridtrain {

namespace {

// A dataset path inside a JSON key: escaped as JSON escapes strings, without the quotes.
std::string json_key(const std::string& text) {
  const std::string quoted = nlohmann::json(text).dump();
  return quoted.substr(1, quoted.size() - 2);
}


// The "step" of a metrics.jsonl line (each begins {"step": N, ...}), or -1.
long long step_of_line(const std::string& line) {
  long long step = -1;
  return std::sscanf(line.c_str(), "{\"step\": %lld", &step) == 1 ? step : -1;
}

// Seconds as h:mm:ss (LAMMPS prints CPU time left so).
std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

// "Checkpt" → "checkpt", "TP comm" → "tp_comm": a TensorBoard tag's last part.
std::string tag_of(const char* name) {
  std::string t;
  for (const char* c = name; *c; ++c) t += *c == ' ' ? '_' : static_cast<char>(std::tolower(*c));
  return t;
}

// The printed line's fix columns: each header, or each figure under it (at least 7 wide).
std::string fix_text(const std::vector<ReportColumn>& columns, bool header) {
  std::string out;
  char cell[64];
  for (const auto& c : columns) {
    if (c.header.empty()) continue;
    const int width = std::max(7, static_cast<int>(c.header.size()));
    if (header) std::snprintf(cell, sizeof cell, " %*s", width, c.header.c_str());
    else std::snprintf(cell, sizeof cell, " %*.2f", width, c.shown);
    out += cell;
  }
  return out;
}

}  // namespace

std::array<double, kSectionCount> SectionRates::per_step_ms(const Timer& timer, long long steps) {
  std::array<double, kSectionCount> ms{};
  for (std::size_t k = 0; k < kSectionCount; ++k) {
    const double now = timer.seconds(static_cast<Section>(k));
    ms[k] = 1e3 * (now - before_[k]) / static_cast<double>(std::max(1LL, steps));
    before_[k] = now;
  }
  return ms;
}

void RemainingTime::step_done(double elapsed_s) {
  if (++done_ == 1) first_s_ = elapsed_s;
  last_s_ = elapsed_s;
}

double RemainingTime::seconds_for(long long steps) const {
  if (done_ == 0) return 0.0;
  const double per_step = done_ == 1 ? first_s_ : (last_s_ - first_s_) / static_cast<double>(done_ - 1);
  return per_step * static_cast<double>(steps);
}

Thermo::Thermo(Log& log, const std::string& metrics_path, long long start_step, const std::string& item, bool accuracy,
               const std::string& tensorboard_dir, std::vector<std::string> datasets, double startup_s)
    : log_(log), rate_header_(item == "token" ? "Tok/s" : "Img/s"), rate_key_(item + "s_per_s"),
      seen_key_(item + "s_seen"), accuracy_(accuracy), datasets_(std::move(datasets)) {
  if (!log_.active()) return;
  std::string kept;
  long long dropped = 0;
  std::vector<std::string> lines;  // all of them, the dropped ones too: the goodput ledger reads them
  if (start_step > 0) {
    std::ifstream in(metrics_path);
    for (std::string line; std::getline(in, line);) {
      if (step_of_line(line) <= start_step) kept += line + "\n";
      else ++dropped;
      lines.push_back(std::move(line));
    }
  }
  ledger_.emplace(lines, start_step, startup_s, unix_seconds());
  replace_file(metrics_path, kept);  // a crash now leaves the old file or the kept lines, not less
  jsonl_.open(metrics_path, std::ios::app);
  if (!jsonl_) throw std::runtime_error("cannot open '" + metrics_path + "' for writing");
  if (dropped > 0)
    log_.print(metrics_path + ": dropped " + std::to_string(dropped) + " line(s) after step " +
               std::to_string(start_step) + " (written after the checkpoint this run resumes from)\n");
  if (tensorboard_dir.empty()) return;
  std::string note;
  tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir, start_step, &note);
  log_.print(note + "TensorBoard: " + tensorboard_->path() + " (tensorboard --logdir " + tensorboard_dir + ")\n");
}

void Thermo::write(const ThermoRow& r) {
  if (!log_.active()) return;
  char line[1024];
  auto per_dataset = [&](bool header) {  // a blend's validation columns, after ValLoss
    std::string cells;
    for (std::size_t d = 0; d < datasets_.size(); ++d) {
      char cell[32];
      if (header) std::snprintf(cell, sizeof cell, " %9s", ("Val" + std::to_string(d + 1)).c_str());
      else if (d < r.val_datasets.size()) std::snprintf(cell, sizeof cell, " %9.4f", r.val_datasets[d]);
      else std::snprintf(cell, sizeof cell, " %9s", "-");
      cells += cell;
    }
    return cells;
  };
  if (!header_done_) {
    std::snprintf(line, sizeof line, "%8s %9s %9s%s %10s %9s %10s %9s %6s %6s%s%s %10s\n", "Step", "Loss", "ValLoss",
                  per_dataset(true).c_str(), "LR", "GradNorm", rate_header_.c_str(), "ms/step", "MFU%", "Skips",
                  accuracy_ ? "    ValAcc" : "", fix_text(r.fixes, true).c_str(), "Remain");
    log_.print(line);
    header_done_ = true;
  }
  char val[16] = "        -", acc[16] = "         -";
  if (r.val_loss) std::snprintf(val, sizeof val, "%9.4f", *r.val_loss);
  if (r.val_accuracy) std::snprintf(acc, sizeof acc, "%10.4f", *r.val_accuracy);
  std::snprintf(line, sizeof line, "%8lld %9.4f %9s%s %10.3e %9.4f %10.0f %9.1f %6.2f %6lld%s%s %10s\n", r.step, r.loss,
                val, per_dataset(false).c_str(), r.lr, r.grad_norm, r.items_per_s, r.step_ms, 100.0 * r.mfu, r.skipped,
                accuracy_ ? acc : "", fix_text(r.fixes, false).c_str(), clock_text(r.remaining_s).c_str());
  log_.print(line);

  std::string json;
  char field[64];
  auto add = [&](const char* key, const char* fmt, auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      if (!std::isfinite(v)) fmt = "null";  // JSON has no NaN/Inf
    }
    std::snprintf(field, sizeof field, fmt, v);
    json += std::string(json.empty() ? "{" : ", ") + "\"" + key + "\": " + field;
  };
  add("step", "%lld", r.step);
  add("loss", "%.8g", r.loss);
  if (r.val_loss) add("val_loss", "%.8g", *r.val_loss);
  for (std::size_t d = 0; d < r.val_datasets.size() && d < datasets_.size(); ++d)
    add(("val_loss/" + json_key(datasets_[d])).c_str(), "%.8g", r.val_datasets[d]);
  if (r.val_accuracy) add("val_accuracy", "%.8g", *r.val_accuracy);
  add("lr", "%.8g", r.lr);
  add("grad_norm", "%.8g", r.grad_norm);
  add(rate_key_.c_str(), "%.6g", r.items_per_s);
  add("step_ms", "%.6g", r.step_ms);
  add("mfu", "%.6g", r.mfu);
  add("comm_bytes", "%llu", static_cast<unsigned long long>(r.comm_bytes));
  add("loss_scale", "%.8g", r.loss_scale);
  add("skipped_steps", "%lld", r.skipped);
  add(seen_key_.c_str(), "%llu", static_cast<unsigned long long>(r.items_seen));
  add("elapsed_s", "%.6g", r.elapsed_s);
  add("remaining_s", "%.6g", r.remaining_s);
  if (r.checkpoint_in_s) add("checkpoint_in_s", "%.6g", *r.checkpoint_in_s);
  add("busy_ms_min", "%.6g", r.busy.min_ms);
  add("busy_ms_mean", "%.6g", r.busy.mean_ms);
  add("busy_ms_max", "%.6g", r.busy.max_ms);
  add("slowest_rank", "%d", r.busy.slowest);
  for (const auto& c : r.fixes) add(c.key.c_str(), "%.8g", c.value);
  json += ", \"goodput\": " + ledger_->line_field(r.elapsed_s, r.checkpoint_s, r.eval_s, unix_seconds());
  jsonl_ << json << "}\n" << std::flush;
  if (tensorboard_) write_tensorboard(r);
}

Goodput Thermo::goodput(double loop_s, double checkpoint_s, double eval_s) const {
  return ledger_ ? ledger_->totals(loop_s, checkpoint_s, eval_s, unix_seconds()) : Goodput{};
}

void Thermo::write_tensorboard(const ThermoRow& r) {
  Scalars s = {{"loss/train", r.loss}, {"optim/lr", r.lr}, {"optim/grad_norm", r.grad_norm},
               {"optim/loss_scale", r.loss_scale}, {"optim/skipped_steps", static_cast<double>(r.skipped)},
               {"throughput/" + rate_key_, r.items_per_s}, {"throughput/mfu", r.mfu},
               {"time/step_ms", r.step_ms}, {"time/remaining_s", r.remaining_s},
               {"memory/model_state_mib", r.state_mib}, {"memory/peak_rss_mib", r.peak_rss_mib},
               {"comm/dp_bytes_per_step", static_cast<double>(r.comm_bytes)}};
  if (r.val_loss) s.emplace_back("loss/val", *r.val_loss);
  for (std::size_t d = 0; d < r.val_datasets.size() && d < datasets_.size(); ++d)
    s.emplace_back("loss/val/" + datasets_[d], r.val_datasets[d]);
  if (r.val_accuracy) s.emplace_back("accuracy/val", *r.val_accuracy);
  for (const auto& c : r.fixes)
    if (!c.tag.empty()) s.emplace_back(c.tag, c.value);
  for (std::size_t k = 0; k < kSectionCount; ++k)
    s.emplace_back("time/" + tag_of(section_name(static_cast<Section>(k))) + "_ms", r.section_ms[k]);
  tensorboard_->write(r.step, s);
}

}  // namespace gridtrain
