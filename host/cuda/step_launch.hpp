#pragma once
// How a CudaReplica's training steps reach its stream. The replica (cuda_replica.hpp) owns the buffers and
// knows how to launch each operation of a step; a StepLaunch decides, for the steps the trainer gives it,
// which of those launches to make and when: one by one, as CUDA graphs, queued into graphs of several steps,
// or as a persistent kernel. The replica picks one way when it is made, from its CudaStepOptions, and
// never changes it; each way is a file of its own:
//
//   plain_step.cpp        every launch as the trainer calls for it (no CUDA graphs)
//   graph_step.cpp        each step, or its gradients, captured once per shape and replayed; the whole step
//                         with the all-reduce inside when the replica owns it (cuda_graphs)
//   queued_steps.cpp      whole steps queued and replayed as one graph of several (steps_per_graph > 1)
//   persistent_steps.cpp  queued whole steps run by one cooperative kernel (persistent)
//
// Every way launches the same kernels with the same arguments in the same order on the stream, so every
// way gives the plain way's results to the bit (cuBLAS aside, which may choose its algorithm differently
// while capturing).
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "kernels/ref/sgd.hpp"

namespace mnistdp {

// The all-reduce of a replica's gradient buffer, enqueued on the stream it is given (the replica's own).
using AllReduceFn = std::function<void(cudaStream_t)>;

// How the steps ran: captured graphs, graph replays, and steps launched the plain way while graphs were on
// (each counted once a launch, however many steps it ran); of these, the launches of several queued
// steps.
struct StepGraphCounts {
  long captured = 0;
  long replayed = 0;
  long plain = 0;
  long multi_step = 0;
};

// What a way of launching may ask of its replica: the launches of one step's operations on the replica's
// buffers and stream, and the little state they share. Implemented by CudaReplica.
class StepOps {
 public:
  virtual cudaStream_t stream() const = 0;
  // Makes the replica's device current on the calling thread.
  virtual void activate() const = 0;
  // Waits for the stream (throws CudaError).
  virtual void wait_for_stream() = 0;
  // Device memory, [1]: where the next step read from the counter has its rows in the epoch's order.
  virtual int* cursor() = 0;
  // Whether steps are being traced: traced steps run the plain way, with their timeline marks.
  virtual bool tracing() const = 0;
  // Grows the activations to `rows` if they are smaller (which drops the step graphs: they hold the old
  // addresses).
  virtual void ensure_rows(int rows) = 0;
  // A shard without rows: zeros in the gradient buffer, loss slot included, with the step's marks.
  virtual void zero_gradients() = 0;
  // The gradients of rows order[first, first + count), count > 0; from_cursor: the rows' offset is read
  // from cursor() (inside a graph) rather than taken from `first`, and the counter moved on by global_batch.
  virtual void enqueue_gradients(int first, int count, int global_batch, bool from_cursor) = 0;
  // The SGD step on the (all-reduced) gradients; first_step: the first with momentum, which starts the
  // buffer.
  virtual void enqueue_sgd(const SgdConfig& cfg, bool first_step) = 0;
  // Whether the fused step (CudaStepOptions::fused_step) takes a shard of `count` rows.
  virtual bool fused_step_takes(int count) const = 0;
  // The fused step's three kernels, rows from cursor(), which they move on by global_batch.
  virtual void enqueue_fused_step(int count, int global_batch, const SgdConfig& cfg) = 0;
  // `steps` whole fused steps in one persistent kernel, the first at row `first` (the counter is neither
  // read nor moved).
  virtual void enqueue_persistent_steps(int count, int global_batch, const SgdConfig& cfg, int first,
                                        int steps) = 0;

 protected:
  ~StepOps() = default;
};

// One way of launching a replica's steps. The replica calls these with its arguments checked and its device
// current (except release_all_reduce, which makes it current itself).
class StepLaunch {
 public:
  virtual ~StepLaunch() = default;

  // Replica::compute_gradients and Replica::sgd_step; first_step: the first SGD step with momentum.
  virtual void compute_gradients(int first, int count, int global_batch) = 0;
  virtual void sgd_step(const SgdConfig& cfg, bool first_step) = 0;

  // Puts on the stream every step sgd_step has been given and kept back: before anything reads or writes
  // what the steps change (parameters, momentum, the loss record, evaluation).
  virtual void launch_queued() = 0;
  // launch_queued, and the gradients compute_gradients has recorded without launching: before anything
  // reads the gradients or the loss, or changes what a recorded step reads (parameters, the order).
  virtual void flush() = 0;
  // Whether anything is kept back (launch_queued or flush would launch something).
  virtual bool holds_steps() const = 0;
  // The activations have moved (once the stream is done with the old ones): graphs that hold their
  // addresses go.
  virtual void drop_graphs() = 0;

  // The all-reduce handed over by a communicator of a lone replica (CudaReplica::adopt_all_reduce), and its
  // return (never throws).
  virtual void adopt_all_reduce(AllReduceFn all_reduce) = 0;
  virtual void release_all_reduce() noexcept = 0;
  virtual bool owns_all_reduce() const = 0;

  virtual StepGraphCounts graph_counts() const = 0;
};

std::unique_ptr<StepLaunch> make_plain_step_launch(StepOps& ops);
std::unique_ptr<StepLaunch> make_graph_step_launch(StepOps& ops);
std::unique_ptr<StepLaunch> make_queued_step_launch(StepOps& ops, int steps_per_graph);
// cant_launch: why the persistent kernel cannot run on this device (refused once the replica is handed its
// all-reduce, where it would run); empty when it can.
std::unique_ptr<StepLaunch> make_persistent_step_launch(StepOps& ops, int steps_per_graph,
                                                        std::string cant_launch);

}  // namespace mnistdp
