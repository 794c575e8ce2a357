#pragma once
// The signals that end a training run early, turned into a request to stop: the step in progress finishes,
// a checkpoint is saved, and the exit code (128 + the signal) says why.
//   SIGINT (Ctrl-C), SIGTERM     the user or a scheduler asks the run to stop
//   SIGHUP                       the terminal was closed
//   SIGPIPE                      standard output was closed (`mnist-dp train | head`): writes to it fail from
//                                then on and are ignored (host/command/progress.hpp's console_print)
// A second SIGINT, SIGTERM or SIGHUP stops the process at once, as it would have without this, after saying
// on standard error what was last saved and where (set_message_on_kill).
//
// A signal belongs to the whole process and may be delivered to any of its threads (OpenBLAS starts its own
// when it loads, before main), so the handler can only record it in process-wide state: lock-free atomics,
// which this class owns the installation of and which nothing else writes.
#include <csignal>
#include <deque>
#include <string>

namespace mnistdp {

class StopSignals {
 public:
  // Installs the handlers; the destructor puts the previous ones back.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const { return signal() != 0; }
  // The signal that asked the run to stop (SIGINT, SIGTERM, SIGHUP or SIGPIPE), or 0.
  int signal() const;

  // What a second signal prints on standard error before the process dies: where the work last saved is.
  // The handler cannot allocate, so every text given stays here until the handlers are removed.
  void set_message_on_kill(std::string text);

 private:
  static constexpr int kSignals = 4;
  struct sigaction previous_[kSignals] {};
  std::deque<std::string> messages_;
};

// "SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE".
const char* signal_name(int sig);

}  // namespace mnistdp
