// A deadline for work that may block inside a library's collective call (HDF5 over MPI-IO),
// where no timeout of ours reaches: when one rank's write fails inside H5Fflush, HDF5's own
// collectives can go out of step across ranks and wait forever. Past the deadline the job is
// aborted from the watchdog's own thread (needs MPI_THREAD_MULTIPLE, which gridtrain requests).
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gridtrain {

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Unless disarm() comes within `seconds` (0 = no deadline), calls message() and aborts the
  /// job with it (abort_job, util/error.hpp). One deadline at a time: arming again replaces it.
  void arm(double seconds, std::function<std::string()> message);
  void disarm();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false, stop_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::function<std::string()> message_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace gridtrain
