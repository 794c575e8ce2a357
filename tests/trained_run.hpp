#pragma once
// What the tests that compare two runs step by step read when a run is over: replica 0's parameters, the
// run's momentum as a checkpoint takes it (Trainer::store_momentum: gathered from the shards under ZeRO-1),
// and every loss the trainer logged. Buffers start as NaN, so that a value never written cannot pass for one.
#include <limits>
#include <vector>

#include "host/model/params.hpp"
#include "host/training/trainer.hpp"
#include "tests/loss_recorder.hpp"

namespace mnistdp::testing {

struct TrainedRun {
  std::vector<float> params;    // [ParamLayout::kCount]
  std::vector<float> momentum;  // [ParamLayout::kCount], or empty before any step with momentum
  std::vector<float> losses;    // one a log line
};

// Runs `trainer` to its end and reads what it left.
inline TrainedRun train_to_end(Trainer& trainer) {
  LossRecorder recorder;
  trainer.run(recorder);
  TrainedRun run;
  run.losses = recorder.losses;
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  run.params.assign(ParamLayout::kCount, kNaN);
  trainer.replicas()[0]->store_parameters(run.params);
  run.momentum.assign(ParamLayout::kCount, kNaN);
  if (!trainer.store_momentum(run.momentum)) run.momentum.clear();
  return run;
}

}  // namespace mnistdp::testing
