#include "host/command/step_words.hpp"

#include <fmt/format.h>

namespace mnistdp {

std::string progress_words(long steps_done, int steps_per_epoch) {
  if (steps_done == 0) return "no step done yet";
  const long epochs = steps_done / steps_per_epoch;
  const long within = steps_done % steps_per_epoch;
  if (within == 0)
    return fmt::format("{} step{} done, {} epoch{} complete", steps_done, steps_done == 1 ? "" : "s", epochs,
                       epochs == 1 ? "" : "s");
  return fmt::format("{} step{} done, epoch {} up to its step {}", steps_done, steps_done == 1 ? "" : "s",
                     epochs, within - 1);
}

std::string step_words(long step, int steps_per_epoch) {
  return fmt::format("epoch {}, step {}", step / steps_per_epoch, step % steps_per_epoch);
}

std::string steps_words(long first, long last, int steps_per_epoch) {
  if (first == last) return step_words(first, steps_per_epoch);
  if (first / steps_per_epoch != last / steps_per_epoch)
    return fmt::format("{} to {}", step_words(first, steps_per_epoch), step_words(last, steps_per_epoch));
  return fmt::format("epoch {}, steps {} to {}", first / steps_per_epoch, first % steps_per_epoch,
                     last % steps_per_epoch);
}

std::string accumulate_words(int accumulate, int batch_size) {
  if (accumulate == 1) return {};
  return fmt::format(" x {} micro-batches a step ({} rows)", accumulate,
                     static_cast<long>(accumulate) * batch_size);
}

}  // namespace mnistdp
