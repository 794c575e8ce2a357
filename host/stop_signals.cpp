#include "host/stop_signals.hpp"

#include <atomic>

namespace mnistdp {

namespace {

std::atomic<int> received_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

extern "C" void on_stop_signal(int sig) {
  if (received_signal.exchange(sig) != 0) {
    // The second signal: the user does not want to wait for the step to finish.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

StopSignals::StopSignals() {
  received_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress (file writes) go on instead of failing with EINTR
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int StopSignals::signal() const {
  return received_signal.load();
}

}  // namespace mnistdp
