#include "gridtrain/app/faults.hpp"

#include <chrono>
#include <thread>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

void Faults::stall(long long step) const {
  if (step == 1 && rank_ == d_.stall_rank) std::this_thread::sleep_for(std::chrono::duration<double>(d_.stall_s));
}

bool Faults::over_memory_budget(double bytes, Axis& world) const {
  if (d_.alloc_limit_mb <= 0) return false;
  double over = bytes > d_.alloc_limit_mb * 1024 * 1024 ? 1 : 0;
  world.blocking_sum(&over, 1, "debug.alloc_limit_mb");
  return over > 0;
}

}  // namespace gridtrain
