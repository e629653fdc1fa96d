#include "gridtrain/app/faults.hpp"

#include <csignal>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <limits>
#include <new>
#include <thread>

#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

bool Faults::wanted(const Config::Debug& debug) {
  return debug.stall_rank >= 0 || debug.nonfinite != NonfiniteFault::None || debug.alloc_limit_mb > 0 ||
         debug.kill_rank >= 0 || debug.slow_rank >= 0;
}

Faults::Faults(const Config::Debug& debug, Axis& world, std::function<double()> step_bytes, Checkpointer& checkpointer)
    : d_(debug), world_(world), rank_(world.rank()), step_bytes_(std::move(step_bytes)), checkpointer_(checkpointer) {}

void Faults::step_begin(long long s) {
  if (first_step_ < 0) first_step_ = s;
  if (s == 1 && rank_ == d_.stall_rank) std::this_thread::sleep_for(std::chrono::duration<double>(d_.stall_s));
  const bool victim = rank_ == d_.kill_rank || (d_.kill_partner && d_.kill_rank >= 0 && rank_ == checkpointer_.partner_rank(d_.kill_rank));
  if (victim && s == d_.kill_step && first_step_ == 0) {
    if (d_.kill_memory) checkpointer_.drop_local_parts();
    std::fprintf(stderr, "debug.kill_rank: rank %d kills itself with SIGKILL after step %lld%s\n", rank_, s,
                 d_.kill_memory ? ", its node's local parts deleted" : "");
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

void Faults::before_forward(long long) {
  if (rank_ == d_.slow_rank) std::this_thread::sleep_for(std::chrono::duration<double>(d_.slow_s));  // in its compute
  if (d_.alloc_limit_mb <= 0) return;
  double over = step_bytes_() > d_.alloc_limit_mb * 1024 * 1024 ? 1 : 0;
  world_.blocking_sum(&over, 1, "debug.alloc_limit_mb");
  if (over > 0) throw std::bad_alloc();
}

torch::Tensor Faults::on_loss(long long s, torch::Tensor loss) {
  return hits(NonfiniteFault::Loss, s) ? loss + std::numeric_limits<double>::quiet_NaN() : loss;
}

void Faults::after_exchange(long long s, const std::vector<torch::Tensor>& grads) {
  if (!hits(NonfiniteFault::Grad, s)) return;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) {
      g.view(-1)[0].fill_(INFINITY);
      return;
    }
}

}  // namespace gridtrain
