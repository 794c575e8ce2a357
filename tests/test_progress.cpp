#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "host/command/progress.hpp"

using namespace mnistdp;
using Catch::Matchers::Contains;

namespace {

// What a ConsoleListener with a progress line writes for `events`.
template <typename Events>
std::string console_text(int epochs, Events events) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  {
    ConsoleListener console(file, /*show_progress=*/true, epochs, 64);
    events(console);
  }
  std::string text(static_cast<std::size_t>(std::ftell(file)), '\0');
  std::rewind(file);
  text.resize(std::fread(text.data(), 1, text.size(), file));
  std::fclose(file);
  return text;
}

}  // namespace

TEST_CASE("the progress line numbers epochs and steps from 0, as the loss lines do", "[progress]") {
  // The first step of a listener draws at once; later ones wait for the redraw interval.
  const std::string text = console_text(5, [](ConsoleListener& c) { c.on_step(1, 199, 938); });
  CHECK_THAT(text, Contains("Epoch 1 of 0-4, step 199 of 0-937"));
  CHECK_THAT(format_step_loss({1, 199, 0.5f}), Contains("Epoch 1, Step 199"));
}

TEST_CASE("an epoch with no step says so instead of 0 steps in 0 s", "[progress]") {
  EpochReport report{2, 0, 0, 0.0, {}, true, 1876};
  report.test = EvalResult{100.0, 80, 100};
  const std::string text = console_text(3, [&](ConsoleListener& c) { c.on_epoch_end(report); });
  CHECK_THAT(text, Contains("Epoch 2: no step run; test loss 1.0000, test accuracy 80.00%"));
  CHECK_THAT(text, !Contains("0 steps") && !Contains("samples/s"));
}
