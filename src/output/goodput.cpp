#include "gridtrain/output/goodput.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

namespace gridtrain {
namespace {

using json = nlohmann::json;

double number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

}  // namespace

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

GoodputLedger::GoodputLedger(const std::vector<std::string>& lines, long long start_step, double startup_s, double now_s)
    : lineage_start_s_(now_s - startup_s) {
  before_.restart_s = startup_s;
  if (start_step == 0) return;  // a fresh lineage: its metrics.jsonl starts over
  // The last attempt's last line (z) and its last line at or before the resume step (kept).
  json z, kept;
  for (const auto& text : lines) {
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("goodput")) continue;
    if (!z.is_null() && number(j["goodput"], "attempt") != number(z["goodput"], "attempt")) kept = json();
    if (number(j, "step") <= static_cast<double>(start_step)) kept = j;
    z = j;
  }
  if (z.is_null()) return;  // written before goodput was recorded: this attempt is the first seen
  const json& g = z["goodput"];
  // What the lineage had before that attempt, and what of the attempt it keeps.
  const double z_loop = number(z, "elapsed_s"), z_ckpt = number(g, "checkpoint_s"), z_eval = number(g, "eval_s");
  const double k_loop = number(kept, "elapsed_s"), k_ckpt = number(kept["goodput"], "checkpoint_s"),
               k_eval = number(kept["goodput"], "eval_s");
  attempt_ = static_cast<int>(number(g, "attempt")) + 1;
  lineage_start_s_ = number(g, "unix_s") - number(g, "wall_s");
  before_.attempts = attempt_;
  before_.productive_s = number(g, "productive_s") - (z_loop - z_ckpt - z_eval) + (k_loop - k_ckpt - k_eval);
  before_.lost_s = number(g, "lost_s") + (z_loop - k_loop);
  before_.checkpoint_s = number(g, "lineage_checkpoint_s") - z_ckpt + k_ckpt;
  before_.eval_s = number(g, "lineage_eval_s") - z_eval + k_eval;
  before_.restart_s = number(g, "restart_s") + std::max(0.0, now_s - startup_s - number(g, "unix_s")) + startup_s;
}

Goodput GoodputLedger::totals(double loop_s, double checkpoint_s, double eval_s, double now_s) const {
  Goodput g = before_;
  g.attempts = attempt_;
  g.wall_s = now_s - lineage_start_s_;
  g.productive_s += loop_s - checkpoint_s - eval_s;
  g.checkpoint_s += checkpoint_s;
  g.eval_s += eval_s;
  return g;
}

std::string goodput_table(const Goodput& g) {
  char line[160];
  std::snprintf(line, sizeof line, "\nGoodput over the lineage (%d attempt%s, %.3f s since its first start): %.1f %%\n",
                g.attempts, g.attempts == 1 ? "" : "s", g.wall_s, 100.0 * g.fraction());
  std::string out = line;
  std::snprintf(line, sizeof line, "%-22s | %12s | %6s\n", "Where the time went", "time (s)", "%total");
  out += line + std::string(46, '-') + "\n";
  const std::pair<const char*, double> rows[] = {{"Productive steps", g.productive_s}, {"Lost (recomputed)", g.lost_s},
                                                 {"Restart and load", g.restart_s},    {"Checkpoint stalls", g.checkpoint_s},
                                                 {"Evaluation", g.eval_s},            {"Other", g.other_s()}};
  for (const auto& [name, s] : rows) {
    std::snprintf(line, sizeof line, "%-22s | %12.3f | %6.2f\n", name, s, g.wall_s > 0 ? 100.0 * s / g.wall_s : 0.0);
    out += line;
  }
  return out;
}

std::string goodput_json(const Goodput& g) {
  return json{{"attempts", g.attempts}, {"wall_s", g.wall_s}, {"productive_s", g.productive_s}, {"lost_s", g.lost_s},
              {"restart_s", g.restart_s}, {"checkpoint_s", g.checkpoint_s}, {"eval_s", g.eval_s},
              {"other_s", g.other_s()}, {"fraction", g.fraction()}}
      .dump();
}

std::string GoodputLedger::line_field(double loop_s, double checkpoint_s, double eval_s, double now_s) const {
  const Goodput g = totals(loop_s, checkpoint_s, eval_s, now_s);
  return json{{"attempt", attempt_},
              {"unix_s", now_s},
              {"checkpoint_s", checkpoint_s},
              {"eval_s", eval_s},
              {"wall_s", g.wall_s},
              {"productive_s", g.productive_s},
              {"lost_s", g.lost_s},
              {"restart_s", g.restart_s},
              {"lineage_checkpoint_s", g.checkpoint_s},
              {"lineage_eval_s", g.eval_s},
              {"fraction", g.fraction()}}
      .dump();
}

}  // namespace gridtrain
