#include "gridtrain/app/faults.hpp"

#include <chrono>
#include <thread>

#include "gridtrain/comm/axis.hpp"

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gridtrain {

void Faults::stall(long long step) const {
  if (step == 1 && rank_ == d_.stall_rank) std::this_thread::sleep_for(std::chrono::duration<double>(d_.stall_s));
}

bool Faults::over_memory_budget(double activation_bytes, Axis& grid) const {
  if (d_.alloc_limit_mb <= 0) return false;
  double over = activation_bytes > d_.alloc_limit_mb * 1024 * 1024 ? 1 : 0;
  grid.blocking_sum(&over, 1, "debug.alloc_limit_mb");
  return over > 0;
}

#ifdef GRIDTRAIN_CUDA
SyncCheck::SyncCheck(bool on) : on_(on) {
  if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}
SyncCheck::~SyncCheck() {
  if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
}
#else
SyncCheck::SyncCheck(bool on) : on_(on) {}
SyncCheck::~SyncCheck() = default;
#endif

}  // namespace gridtrain
