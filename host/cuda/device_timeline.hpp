#pragma once
// A replica's timeline on the device (host/training/trace.hpp's marks): one event a mark of every traced
// step, recorded on the replica's stream between the step's launches, and timed against an anchor whose host
// time is known. CudaStep is given the timeline and records the marks itself, so that nothing it launches
// calls back into the replica.
#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "host/training/trace.hpp"
#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp {

class DeviceTimeline {
 public:
  // Marks the next `steps` steps from here on (none for 0), dropping what was marked before. Waits for the
  // stream once, to tie its time to the host's trace clock.
  void trace(long steps, cudaStream_t stream);
  // Whether the steps given from now on are marked.
  bool tracing() const { return remaining_ > 0; }
  // Records mark m of the step in progress on `stream`, while tracing; Mark::sgd_end closes the step.
  void mark(Mark m, cudaStream_t stream);
  // Every marked step's times, in the host's trace clock (microseconds); the stream must be done with them.
  // Ends the tracing.
  std::vector<StepMarks> take();

 private:
  long remaining_ = 0;
  long steps_ = 0;  // steps marked whole
  std::vector<Event> events_;
  std::optional<Event> anchor_;
  double anchor_us_ = 0.0;
};

}  // namespace mnistdp
