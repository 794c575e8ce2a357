#pragma once
// A listener that keeps every loss the trainer logs, and counts the steps: what the tests that compare two
// runs step by step read.
#include <vector>

#include "host/training/trainer.hpp"

namespace mnistdp::testing {

class LossRecorder final : public TrainListener {
 public:
  void on_step_loss(const StepLoss& s) override { losses.push_back(s.loss); }
  void on_step(int /*epoch*/, int /*step*/, int /*steps_in_epoch*/) override { ++steps; }
  std::vector<float> losses;  // one a log line
  long steps = 0;
};

}  // namespace mnistdp::testing
