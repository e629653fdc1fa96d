#include "gridtrain/util/signals.hpp"

#include <csignal>

namespace gridtrain {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void record_signal(int sig) { g_signal = sig; }
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int received_stop_signal() { return g_signal; }

}  // namespace gridtrain
