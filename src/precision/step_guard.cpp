#include "gridtrain/precision/step_guard.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
StepGuard::StepGuard(const Config& c, Axis& world, int dp, int micro_batch, int accumulation, Log& log)
    : cfg_(c), world_(world), dp_(dp), micro_batch_(micro_batch), accumulation_(accumulation), log_(log) {
  const auto& p = c.precision;
  if (p.loss_scaling == LossScaling::Dynamic || (p.loss_scaling == LossScaling::Auto && p.type == PrecisionType::Fp16))
    scaler_ = std::make_unique<LossScaler>(LossScalerOptions{p.init_scale, p.growth_factor, p.backoff_factor,
                                                             p.growth_interval, p.hysteresis, p.min_scale});
  if (c.train.skip_outliers) {
    loss_window_ = std::make_unique<OutlierWindow>(c.train.outlier_window, c.train.outlier_z);
    norm_window_ = std::make_unique<OutlierWindow>(c.train.outlier_window, c.train.outlier_z);
  }
}

StepGuard::~StepGuard() = default;

double StepGuard::loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }

Verdict StepGuard::judge(long long step, const StepReport& mine, bool local_gradients) {
  const double scale = loss_scale();
  const double local_sq = mine.grad_sq / (scale * scale);
  double sums[4] = {mine.counts_loss ? mine.loss : 0.0, local_sq,
                    std::isfinite(mine.loss) && std::isfinite(local_sq) ? 0.0 : 1.0, mine.oom ? 1.0 : 0.0};
  world_.blocking_sum(sums, 4, "loss, gradient norm and step flags");
  if (sums[3] > 0) {
    back_off(step, static_cast<int>(sums[3]));
    return {Verdict::Action::Retry};
  }
  const double loss = sums[0] / dp_;
  // Every parameter is counted once per dp replica. Reported: the norm of the averaged gradient,
  // or with local gradients the RMS of the ranks' norms; clipping uses what this rank holds.
  const double norm = std::sqrt(sums[1] / dp_);
  const double clip_norm = local_gradients ? std::sqrt(local_sq) : norm;
  const bool finite = sums[2] == 0;
  const bool outlier = finite && loss_window_ && (loss_window_->is_outlier(loss) || norm_window_->is_outlier(norm));
  if (scaler_) scaler_->update(finite);
  if (!finite || outlier) {
    skip(step, !finite, loss, norm);
    return {Verdict::Action::Skip, loss, norm};
  }
  stuck_ = 0;
  if (loss_window_) loss_window_->add(loss), norm_window_->add(norm);
  double factor = 1.0 / scale;
  if (cfg_.optim.clip_grad > 0 && clip_norm > cfg_.optim.clip_grad) factor *= cfg_.optim.clip_grad / (clip_norm + 1e-6);
  return {Verdict::Action::Update, loss, norm, factor};
}

void StepGuard::skip(long long step, bool nonfinite, double loss, double norm) {
  ++(nonfinite ? skipped_nonfinite_ : skipped_outliers_);
  log_.print("Step " + std::to_string(step + 1) + ": update skipped, " + (nonfinite ? "non-finite" : "outlier") +
             " (loss " + fmt("%.4g", loss) + ", grad norm " + fmt("%.4g", norm) +
             (scaler_ ? ", loss scale now " + fmt("%g", scaler_->scale()) : "") + ")\n");
  // A non-finite step above the minimum loss scale is the scaler at work; any other skip in a
  // row means training is not going on.
  if (nonfinite && scaler_ && !scaler_->at_min()) return;
  if (++stuck_ < cfg_.train.max_consecutive_skips) return;
  const std::string hint =
      nonfinite ? std::string("non-finite loss or gradient") +
                      (scaler_ ? " at the minimum loss scale " + fmt("%g", scaler_->scale()) : "") +
                      "); lower optim.lr or raise optim.warmup_steps" +
                      (cfg_.precision.type == PrecisionType::Fp16 ? ", or use precision.type = bf16" : "")
                : std::string("loss or gradient-norm spike beyond train.outlier_z); the run has left the last "
                              "train.outlier_window accepted steps behind: raise train.outlier_z or "
                              "train.outlier_window, or set train.skip_outliers = false");
  throw Error("step " + std::to_string(step + 1) + ": " + std::to_string(stuck_) +
              " updates in a row were skipped (train.max_consecutive_skips = " +
              std::to_string(cfg_.train.max_consecutive_skips) + "; the last for a " + hint);
}

void StepGuard::back_off(long long step, int ranks) {
  const int B = micro_batch_;
  const std::string what = "step " + std::to_string(step + 1) + ": out of memory in forward/backward on " +
                           std::to_string(ranks) + " rank(s) with train.micro_batch = " + std::to_string(B);
  if (cfg_.train.on_oom != OnOom::Backoff)
    throw Error(what + "; lower train.micro_batch (accumulation keeps the global batch)" +
                (cfg_.grid.tp == 1 && cfg_.grid.pp == 1 ? " or set train.on_oom = backoff" : ""));
  const std::string after = oom_backoffs_ ? " after " + std::to_string(oom_backoffs_) + " backoff(s)" : "";
  if (B == 1) throw Error(what + after + ": nothing left to halve; a single sequence does not fit");
  if (B % 2 != 0) throw Error(what + after + ", which cannot be halved; start from a power of two");
  micro_batch_ = B / 2;
  accumulation_ *= 2;
  ++oom_backoffs_;
  log_.print(what + ": micro-batch " + std::to_string(B) + " -> " + std::to_string(micro_batch_) + ", accumulation " +
             std::to_string(accumulation_ / 2) + " -> " + std::to_string(accumulation_) + "; retrying the step\n");
}

TrainState StepGuard::state() const {
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

void StepGuard::restore(const TrainState& st) {
  for (const auto& [name, v] : st) {
    if (name == "skipped_steps" && v.size() == 3) {
      skipped_nonfinite_ = static_cast<long long>(v[0]);
      skipped_outliers_ = static_cast<long long>(v[1]);
      stuck_ = static_cast<long long>(v[2]);
    } else if (name == "loss_scaler" && scaler_ && v.size() == 3) {
      scaler_->set_state({v[0], v[1], v[2]});
    } else if (name.starts_with("outlier_window_") && loss_window_) {
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

}  // namespace gridtrain
