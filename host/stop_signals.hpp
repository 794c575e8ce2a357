#pragma once
// SIGINT and SIGTERM during training: instead of dying mid-step, the run finishes the step in progress, saves
// a checkpoint and exits non-zero. A second signal stops the process at once, as it would have without this.
//
// A signal belongs to the whole process and may be delivered to any of its threads (OpenBLAS starts its own
// when it loads, before main), so the handler can only record it in process-wide state: one lock-free atomic,
// which this class owns the installation of and which nothing else writes.
#include <csignal>

namespace mnistdp {

class StopSignals {
 public:
  // Installs the handlers; the destructor puts the previous ones back.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const { return signal() != 0; }
  // The signal that arrived (SIGINT or SIGTERM), or 0.
  int signal() const;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

}  // namespace mnistdp
