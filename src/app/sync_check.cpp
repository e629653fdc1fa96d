#include "gridtrain/app/sync_check.hpp"

#ifdef GRIDTRAIN_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gridtrain {

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
