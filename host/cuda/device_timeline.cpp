#include "host/cuda/device_timeline.hpp"

#include <cstddef>

namespace mnistdp {

void DeviceTimeline::trace(long steps, cudaStream_t stream) {
  events_.clear();
  steps_ = 0;
  remaining_ = steps;
  if (steps <= 0) return;
  for (long i = 0; i < steps * kMarksPerStep; ++i)
    events_.emplace_back(cudaEventDefault);
  // The anchor ties device time to the host's trace clock: the host reads its clock right after the anchor
  // has completed, so the two differ by one synchronisation's latency at most.
  anchor_.emplace(cudaEventDefault);
  anchor_->record(stream);
  anchor_->synchronize();
  anchor_us_ = trace_clock_us();
}

void DeviceTimeline::mark(Mark m, cudaStream_t stream) {
  if (remaining_ <= 0) return;
  events_[static_cast<std::size_t>(steps_ * kMarksPerStep + static_cast<int>(m))].record(stream);
  if (m == Mark::sgd_end) {
    ++steps_;
    --remaining_;
  }
}

std::vector<StepMarks> DeviceTimeline::take() {
  std::vector<StepMarks> steps;
  if (!anchor_) return steps;
  for (long k = 0; k < steps_; ++k) {
    StepMarks& marks = steps.emplace_back();
    for (int m = 0; m < kMarksPerStep; ++m) {
      const Event& e = events_[static_cast<std::size_t>(k * kMarksPerStep + m)];
      marks[static_cast<std::size_t>(m)] = anchor_us_ + 1000.0 * e.elapsed_ms_since(*anchor_);
    }
  }
  remaining_ = 0;
  return steps;
}

}  // namespace mnistdp
