#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "host/command/explain.hpp"

using namespace mnistdp;
using Catch::Matchers::Contains;

namespace {

std::string explain(const TrainConfig& config, int train_count, const std::vector<std::string>& replicas) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  explain_first_step(file, config, train_count, replicas, "test sum");
  std::string text(static_cast<std::size_t>(std::ftell(file)), '\0');
  std::rewind(file);
  const std::size_t read = std::fread(text.data(), 1, text.size(), file);
  std::fclose(file);
  text.resize(read);
  return text;
}

}  // namespace

TEST_CASE("explain tells each replica's rows and the global-batch scaling", "[explain]") {
  TrainConfig config;
  const std::string text = explain(config, 60000, {"cpu:0", "cpu:1", "cpu:2"});
  CHECK_THAT(text, Contains("replica 0 (cpu:0): batch rows 0 to 21"));
  CHECK_THAT(text, Contains("replica 1 (cpu:1): batch rows 22 to 43"));
  CHECK_THAT(text, Contains("replica 2 (cpu:2): batch rows 44 to 63"));
  CHECK_THAT(text, Contains("/ 64 (the global batch"));
  CHECK_THAT(text, Contains("203531 floats"));
}

TEST_CASE("explain says when a replica gets no rows", "[explain]") {
  TrainConfig config;
  config.batch_size = 2;
  const std::string text = explain(config, 100, {"a", "b", "c"});
  CHECK_THAT(text, Contains("replica 2 (c): no rows this step"));
  CHECK_THAT(text, Contains("/ 2 (the global batch"));
}

TEST_CASE("explain tells a resumed run's next step and every SGD setting", "[explain]") {
  TrainConfig config;
  config.batch_size = 10;
  config.start_step = 13;  // 10 steps an epoch over 100 rows: epoch 1, step 3
  config.sgd.momentum = 0.9f;
  config.sgd.weight_decay = 0.001f;
  config.sgd.dampening = 0.5f;
  const std::string text = explain(config, 100, {"a", "b"});
  CHECK_THAT(text, Contains("What step 3 of epoch 1 does"));
  CHECK_THAT(text, Contains("drawn from seed 0 and epoch 1"));
  CHECK_THAT(text, Contains("10 rows from position 30"));
  CHECK_THAT(text, Contains("momentum 0.9") && Contains("dampening 0.5") && Contains("weight decay 0.001") &&
                       Contains("Nesterov off"));
}
