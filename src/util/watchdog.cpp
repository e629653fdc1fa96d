#include "gridtrain/util/watchdog.hpp"

#include "gridtrain/util/error.hpp"

namespace gridtrain {

Watchdog::Watchdog() : thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::arm(double seconds, std::function<std::string()> message) {
  {
    std::lock_guard lock(mutex_);
    armed_ = seconds > 0;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
    message_ = std::move(message);
  }
  changed_.notify_all();
}

void Watchdog::disarm() {
  {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }
  changed_.notify_all();
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      changed_.wait(lock);
    } else if (changed_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
               std::chrono::steady_clock::now() >= deadline_) {
      abort_job(message_());
    }
  }
}

}  // namespace gridtrain
