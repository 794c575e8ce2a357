#pragma once
// What a person watching the run sees: the reference program's loss lines, a progress line on a terminal, and
// a summary after each epoch.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "host/training/trainer.hpp"

namespace mnistdp {

// Writes text to out and flushes it, ignoring failure: a closed standard output (a pipe whose reader has
// gone, a terminal that hung up) must not end a run that can still save its work. The signal that comes
// with it (SIGPIPE, SIGHUP) stops the run instead (host/command/stop_signals.hpp).
void console_write(std::FILE* out, std::string_view text);

template <typename... Args>
void console_print(std::FILE* out, fmt::format_string<Args...> format, Args&&... args) {
  console_write(out, fmt::format(format, std::forward<Args>(args)...));
}

class ConsoleListener final : public TrainListener {
 public:
  // batch_size turns steps into samples for the progress line's speed.
  ConsoleListener(std::FILE* out, bool show_progress, int epochs, int batch_size);
  ~ConsoleListener() override;
  ConsoleListener(const ConsoleListener&) = delete;
  ConsoleListener& operator=(const ConsoleListener&) = delete;

  void on_step_loss(const StepLoss& s) override;
  void on_step(int epoch, int step, int steps_in_epoch) override;
  void on_epoch_end(const EpochReport& r) override;

  // The run is on emulated devices (docs/emulation.md): every time printed is marked as the emulator's.
  void mark_times_emulated() { times_emulated_ = true; }

 private:
  void clear_progress();

  std::FILE* out_;
  bool show_progress_;
  int epochs_;
  int batch_size_;
  bool progress_drawn_ = false;
  bool times_emulated_ = false;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// The reference program's exact line: `Epoch {epoch}, Step {i}, Loss: {loss.item()}`. loss.item() is a Python
// float, so the loss is printed as the shortest decimal that reads back to the same double, as Python's repr
// does.
std::string format_step_loss(const StepLoss& s);

}  // namespace mnistdp
