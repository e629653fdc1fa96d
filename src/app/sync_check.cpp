#include "gridtrain/app/sync_check.hpp"

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gridtrain {

SyncCheck::SyncCheck(bool on, StepPhase phase) : on_(on) { enter(phase); }

SyncCheck::~SyncCheck() { enter(StepPhase::Host); }

void SyncCheck::enter(StepPhase phase) {
#ifdef GRIDTRAIN_CUDA
  if (!on_) return;
  using c10::cuda::SyncDebugMode;
  c10::cuda::warning_state().set_sync_debug_mode(phase == StepPhase::Host ? SyncDebugMode::L_DISABLED
                                                                          : SyncDebugMode::L_ERROR);
#else
  (void)on_;
  (void)phase;
#endif
}

}  // namespace gridtrain
