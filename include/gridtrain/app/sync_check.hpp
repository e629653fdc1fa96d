// debug.sync_check: no host synchronisation where the GPU must run ahead of the host.
#pragma once

namespace gridtrain {

/// debug.sync_check on a GPU: while a SyncCheck(true) lives, an operation that makes the host wait
/// for the device (an .item(), a copy to the host, a blocking cudaMemcpy) throws c10::Error —
/// c10's sync debug mode at error level, as torch.cuda.set_sync_debug_mode("error"). The Trainer
/// holds one over forward/backward and over the optimizer step. SyncCheck(false) and CPU builds
/// do nothing.
class SyncCheck {
 public:
  explicit SyncCheck(bool on);
  ~SyncCheck();
  SyncCheck(const SyncCheck&) = delete;
  SyncCheck& operator=(const SyncCheck&) = delete;

 private:
  bool on_;
};

}  // namespace gridtrain
