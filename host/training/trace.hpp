#pragma once
// A timeline of each replica's phases, step by step, in Chrome's trace event format (chrome://tracing and
// Perfetto open it): one row per replica, so the replicas are seen working side by side and waiting for the
// all-reduce.
//
// A replica records seven marks per step; the phases lie between them:
//   gather | forward | loss | backward | all-reduce (and waiting for it) | sgd
#include <array>
#include <chrono>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mnistdp {

enum class Mark { gather, forward, loss, backward, backward_end, sgd, sgd_end };
inline constexpr int kMarksPerStep = 7;

// The marks of one step, in microseconds on the trace clock.
using StepMarks = std::array<double, kMarksPerStep>;

// The trace clock: the host's steady clock in microseconds. Every replica of a process uses it (GPU replicas
// anchor their CUDA events to it), so the rows line up.
inline double trace_clock_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Collects the marks of the next `steps` steps of a CPU replica, with host clocks.
class HostTimeline {
 public:
  void start(long steps) {
    remaining_ = steps;
    steps_.clear();
  }
  void mark(Mark m) {
    if (remaining_ <= 0) return;
    if (m == Mark::gather) steps_.emplace_back();
    steps_.back()[static_cast<int>(m)] = trace_clock_us();
    if (m == Mark::sgd_end) --remaining_;
  }
  std::vector<StepMarks> take() {
    remaining_ = 0;
    return std::move(steps_);
  }

 private:
  long remaining_ = 0;
  std::vector<StepMarks> steps_;
};

// nn.DataParallel's copies, as device 0 makes them each step (host/training/data_parallel.hpp): the phases
// lie between these marks, in order: broadcast | (forward passes) | gather | loss | scatter | (backward
// passes) | reduce.
enum class LinkMark { broadcast, broadcast_end, gather, loss, scatter, scatter_end, reduce, reduce_end };
inline constexpr int kLinkMarksPerStep = 8;
using LinkStepMarks = std::array<double, kLinkMarksPerStep>;

// How the replicas shared each step, which names the phases between the marks: under the all-reduce, the
// span after the backward pass is the all-reduce; under DataParallel, the span after the forward pass is
// the trip through device 0 (gather, loss, scatter) and the one after the backward pass the reduction onto
// device 0 (the other replicas take no SGD step); under ZeRO-1 the span after the backward pass is the
// reduce-scatter, and the collectives, timed on the host, have a row of their own (the LinkStepMarks' reduce
// and broadcast marks: the reduce-scatter and the all-gather).
enum class TraceStrategy { allreduce, dataparallel, zero1 };

// What a reader of the trace (bench/trace_report.py) needs to know of the run besides the marks: written as
// the trace's "mnist_dp" object, so that each step's rows, shards and bytes can be worked out from it.
struct TraceRun {
  int world_replicas = 1;  // every process's replicas (the shards are numbered across them)
  int processes = 1;
  int batch_size = 64;
  int accumulate = 1;
  int train_count = 0;
};

// Writes the trace: replica_marks[r][k] holds replica r's marks of step first_step + k (steps counted in all,
// so that a resumed run's steps keep their numbers); names label the rows. link_marks: DataParallel's copies
// (one row of their own, "device 0's copies"), or empty. micro_batches: where steps accumulate several
// micro-batches (--accumulate), the count of each traced step's; a timeline then holds one entry per
// micro-batch, each span names its step and micro-batch, and the exchange and SGD spans are the last
// micro-batch's alone. Empty: one entry per step.
void write_chrome_trace(const std::filesystem::path& path,
                        const std::vector<std::vector<StepMarks>>& replica_marks,
                        const std::vector<std::string>& names, long first_step = 0,
                        TraceStrategy strategy = TraceStrategy::allreduce,
                        const std::vector<LinkStepMarks>& link_marks = {},
                        std::span<const int> micro_batches = {}, const TraceRun* run = nullptr);

}  // namespace mnistdp
