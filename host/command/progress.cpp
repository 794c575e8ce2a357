#include "host/command/progress.hpp"

#include <fmt/format.h>

namespace mnistdp {

namespace {
using Clock = std::chrono::steady_clock;
// Redrawing more often than this costs time and shows nothing a person can read.
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;
}  // namespace

void console_write(std::FILE* out, std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

std::string format_step_loss(const StepLoss& s) {
  return fmt::format("Epoch {}, Step {}, Loss: {}", s.epoch, s.step, static_cast<double>(s.loss));
}

ConsoleListener::ConsoleListener(std::FILE* out, bool show_progress, int epochs, int batch_size)
    : out_(out),
      show_progress_(show_progress),
      epochs_(epochs),
      batch_size_(batch_size),
      epoch_start_(Clock::now()),
      last_draw_(Clock::now() - kRedrawInterval) {}

ConsoleListener::~ConsoleListener() {
  clear_progress();
}

void ConsoleListener::clear_progress() {
  if (!progress_drawn_) return;
  console_write(out_, "\r\033[K");
  progress_drawn_ = false;
}

void ConsoleListener::on_step_loss(const StepLoss& s) {
  clear_progress();
  console_print(out_, "{}\n", format_step_loss(s));
}

void ConsoleListener::on_step(int epoch, int step, int steps_in_epoch) {
  const auto now = Clock::now();
  if (step == 0) epoch_start_ = now;
  if (!show_progress_ || now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const int done = step + 1;
  const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
  const double steps_per_s = elapsed > 0 ? done / elapsed : 0.0;
  const double eta = steps_per_s > 0 ? (steps_in_epoch - done) / steps_per_s : 0.0;
  const int filled = steps_in_epoch > 0 ? done * kBarWidth / steps_in_epoch : kBarWidth;
  // Epochs and steps numbered from 0, as the loss lines number them.
  console_print(out_,
                "\r\033[KEpoch {} of 0-{}, step {} of 0-{} [{:#<{}}{:.<{}}] {:.0f} samples/s, eta {:.1f} s",
                epoch, epochs_ - 1, step, steps_in_epoch - 1, "", filled, "", kBarWidth - filled,
                steps_per_s * batch_size_, eta);
  progress_drawn_ = true;
}

void ConsoleListener::on_epoch_end(const EpochReport& r) {
  clear_progress();
  std::string line;
  if (r.steps == 0) {
    // A resumed run with no step left to run, or one stopped before its first step.
    line = fmt::format("Epoch {}: no step run", r.epoch);
  } else {
    const double rate = r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0.0;
    line = fmt::format("Epoch {} {}: {} step{} in {:.3f} s ({}{:.0f} samples/s, {:.1f} us/step)", r.epoch,
                       r.complete ? "done" : "stopped", r.steps, r.steps == 1 ? "" : "s", r.seconds,
                       times_emulated_ ? "emulated, no GPU time: " : "", rate, r.seconds * 1e6 / r.steps);
  }
  if (r.test.count > 0)
    line += fmt::format("; test loss {:.4f}, test accuracy {:.2f}%", r.test.mean_loss(),
                        100.0 * r.test.accuracy());
  console_print(out_, "{}\n", line);
}

}  // namespace mnistdp
