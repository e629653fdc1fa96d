// debug.sync_check: no host synchronisation where the GPU must run ahead of the host.
#pragma once

namespace gridtrain {

/// The phases of a training step as the Trainer enters them. Device phases (forward/backward
/// through the pipeline schedule, the optimizer's update, publishing the updated weights) queue
/// work for the device and must never wait for it; host phases (the step's data, the gradient
/// exchange's verdict, after_update fixes) may.
enum class StepPhase { Host, Forward, Update, Publish };

/// An observer of the step's phases. With debug.sync_check on a GPU, in a device phase, an
/// operation that makes the host wait for the device (an .item(), a copy to the host, a blocking
/// cudaMemcpy) throws c10::Error: c10's sync debug mode at error level, as
/// torch.cuda.set_sync_debug_mode("error"). Off (SyncCheck(false)) and in CPU builds it does
/// nothing. The destructor returns to Host, also when a step throws.
class SyncCheck {
 public:
  explicit SyncCheck(bool on, StepPhase phase = StepPhase::Host);
  ~SyncCheck();
  void enter(StepPhase phase);
  SyncCheck(const SyncCheck&) = delete;
  SyncCheck& operator=(const SyncCheck&) = delete;

 private:
  bool on_;
};

}  // namespace gridtrain
