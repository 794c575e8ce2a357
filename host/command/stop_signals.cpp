#include "host/command/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace mnistdp {

namespace {

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

std::atomic<int> received_signal{0};
std::atomic<const char*> kill_message{nullptr};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");
static_assert(std::atomic<const char*>::is_always_lock_free, "the signal handler needs a lock-free atomic");

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGPIPE) {
    // Every later write to the closed output raises it again: it asks once, and never ends the process.
    int none = 0;
    received_signal.compare_exchange_strong(none, SIGPIPE);
    return;
  }
  const int before = received_signal.exchange(sig);
  if (before != 0 && before != SIGPIPE) {
    // The second signal: the user does not want to wait for the step to finish.
    if (const char* text = kill_message.load()) {
      const ssize_t written = ::write(STDERR_FILENO, text, std::strlen(text));
      static_cast<void>(written);
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

StopSignals::StopSignals() {
  received_signal.store(0);
  kill_message.store(nullptr);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress (file writes) go on instead of failing with EINTR
  for (int i = 0; i < kSignals; ++i)
    sigaction(kHandled[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kSignals; ++i)
    sigaction(kHandled[i], &previous_[i], nullptr);
  kill_message.store(nullptr);
}

int StopSignals::signal() const {
  return received_signal.load();
}

void StopSignals::set_message_on_kill(std::string text) {
  messages_.push_back(std::move(text));
  kill_message.store(messages_.back().c_str());
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "a signal";
  }
}

}  // namespace mnistdp
