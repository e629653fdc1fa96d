#include "gridtrain/util/signals.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <thread>

namespace gridtrain {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_graceful{false};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  return set;
}

// The one thread that takes SIGUSR1 and SIGTERM: every other thread blocks them, so no signal
// ever interrupts MPI, HDF5, PMIx or a compute kernel (no EINTR or short read or write inside
// a library call, no handler on a thread's stack).
void take_signals() {
  const sigset_t set = stop_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_graceful.load()) {
      g_signal.store(sig);
      continue;
    }
    // Before training asks for them (another verb, or setup): the default action, termination.
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
  }
}

}  // namespace

void start_signal_thread() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by every thread started from now on
  std::thread(take_signals).detach();
}

void install_stop_handlers() { g_graceful.store(true); }

int received_stop_signal() { return g_signal.load(); }

}  // namespace gridtrain
