#pragma once
// One copy of SimpleNet on one device (a CPU thread, or a GPU), with everything that copy owns: parameters,
// gradients, optimiser state, activations and the data set. The trainer drives replicas only through this
// interface, so that the data-parallel logic is the same for every backend.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "host/training/trace.hpp"
#include "kernels/ref/sgd.hpp"

// The CUDA runtime's stream type (cudaStream_t is a CUstream_st*), declared here so that the interface needs
// no CUDA header: a CPU-only build has none.
struct CUstream_st;

namespace mnistdp {

// Where a replica's gradient buffer lives when it is device memory, for a communicator that sums on the
// device: the CUDA device, and the stream the replica's work is ordered on (an all-reduce of the buffer must
// come after compute_gradients and before sgd_step on it).
struct DevicePlace {
  int device = 0;
  CUstream_st* stream = nullptr;
};

struct EvalResult {
  double loss_sum = 0.0;  // sum of the per-sample losses
  long correct = 0;       // samples whose argmax is the label
  long count = 0;

  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const { return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0; }
};

// The first step whose loss was not finite, as a replica that checks the loss where it runs records it.
struct NonFiniteLoss {
  long step;       // numbered in all, from 0
  float loss_sum;  // the global batch's (after the all-reduce): NaN or an infinity
};

class Replica {
 public:
  virtual ~Replica() = default;
  Replica() = default;
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // What and where this replica is, for logs: "cpu", "cuda:0 NVIDIA H200".
  virtual std::string description() const = 0;

  // params: [ParamLayout::kCount] host memory, copied in or out. Not const: a replica may hold steps back
  // (a GPU replica replaying several steps as one graph), and launches them before a copy out.
  virtual void load_parameters(std::span<const float> params) = 0;
  virtual void store_parameters(std::span<float> params) = 0;
  // momentum: [ParamLayout::kCount]; none until the first step with momentum (as in torch.optim.SGD), and
  // loading an empty span returns to that state. A replica that holds the momentum of one shard alone
  // (ZeRO-1, sgd_step_shard) stores that shard's values at their places and leaves the rest of `momentum`
  // as it is, and loads its shard's values alone; loaded before its first sgd_step_shard, the whole buffer
  // is kept until that step names the shard.
  virtual void load_momentum(std::span<const float> momentum) = 0;
  virtual void store_momentum(std::span<float> momentum) = 0;
  virtual bool has_momentum() const = 0;

  // The epoch's order of training rows, epoch_order(seed, epoch) (host/model/init.hpp): the same permutation
  // on every replica, each making it itself (a GPU replica on its device, with nothing copied from the host).
  // It may come while steps of the previous epoch are still running on a device; those steps read the order
  // they were called with. The trainer's way.
  virtual void make_epoch_order(std::uint64_t seed, int epoch) = 0;
  // Any order of training rows, given by the caller (tests, benchmarks) instead: same rules, and the caller
  // may reuse `order` as soon as this returns. A GPU replica copies it to the device.
  virtual void set_epoch_order(std::span<const std::int32_t> order) = 0;

  // Forward and backward over rows order[first, first + count) of the training set. Gradients are scaled by
  // 1 / global_batch (not 1 / count), so that summing the replicas' buffers gives the gradient of the global
  // batch's mean loss. Writes the gradient buffer, [ParamLayout::kGradCount], loss sum in its last slot.
  // count may be 0: the buffer is then zeros.
  virtual void compute_gradients(int first, int count, int global_batch) = 0;

  // The gradient buffer, after compute_gradients and after the all-reduce (host memory for CPU replicas,
  // device memory for GPU replicas).
  virtual float* gradient_buffer() = 0;

  // Gradient accumulation (--accumulate K, DDP's no_sync): keep_gradients() sets the gradient buffer, loss
  // slot included, aside; add_kept_gradients() then makes the buffer the kept values plus the buffer as it
  // stands, element by element, each addition rounded once, as the host communicator adds two replicas'
  // buffers. Between the two calls the replica computes the next micro-batch's gradient into the buffer.
  virtual void keep_gradients() = 0;
  virtual void add_kept_gradients() = 0;
  // This replica takes no SGD step after the gradients just computed (DataParallel's replicas other than 0,
  // or a micro-batch before the last of an accumulated step): it closes the step's timeline marks here.
  virtual void no_sgd_step() = 0;

  // One torch.optim.SGD step with the gradient buffer as it stands (all-reduced by then).
  virtual void sgd_step(const SgdConfig& cfg) = 0;

  // ZeRO-1's pieces (--strategy zero1, host/training/zero1.cpp). The parameters, in the replica's memory (as
  // gradient_buffer()): [ParamLayout::kCount]. A replica without them throws std::logic_error.
  virtual float* parameter_buffer();
  // One torch.optim.SGD step on parameters [first, first + count) alone, with the gradient buffer's values
  // there, the replica keeping momentum for that shard alone (count floats, never the whole buffer's): the
  // first call names the shard, and every later one must name the same. Marks the timeline's sgd and
  // sgd_end as sgd_step does.
  virtual void sgd_step_shard(const SgdConfig& cfg, std::size_t first, std::size_t count);

  // compute_gradients(first, count, count) and sgd_step(cfg) as one, for a replica that is the only one in
  // the run (there is nothing to all-reduce), with whatever that lets it fuse or keep back: the same results.
  // The one way a lone replica's step is taken, on every backend (the trainer calls it for every step of a
  // run of one replica). Returns false, having done nothing, where the replica has no such way for these
  // settings: the trainer then takes the two calls.
  virtual bool step_alone(int /*first*/, int /*count*/, const SgdConfig& /*cfg*/) { return false; }
  // Whether step_alone may take a step at all with this replica's settings, asked once by the trainer, so
  // that a replica with no such way is never asked step by step.
  virtual bool takes_whole_steps() const { return false; }

  // Where the gradient buffer lives, for a communicator: a device and its stream, or nullopt for host
  // memory (a CPU replica).
  virtual std::optional<DevicePlace> device_place() const { return std::nullopt; }

  // nn.DataParallel's step, in the pieces a replica takes (host/training/data_parallel.hpp): the forward
  // pass of its shard, the loss of the whole batch (device 0 alone), and the backward pass from the d(logits)
  // device 0 scatters. The copies between them are DataParallelLinks'. A replica without them throws
  // std::logic_error.
  //
  // Its buffers, in its own memory (host or device, as gradient_buffer()): valid until a call for more rows.
  struct ShardBuffers {
    float* params = nullptr;         // [ParamLayout::kCount]
    float* logits = nullptr;         // [rows, 10]: forward_logits' result
    std::uint8_t* labels = nullptr;  // [rows]: the labels of forward_logits' rows
    float* dlogits = nullptr;        // [rows, 10]: what backward_from_dlogits reads
  };
  virtual ShardBuffers shard_buffers(int rows);
  // The logits, and the labels, of rows order[first, first + count) under the current parameters.
  virtual void forward_logits(int first, int count);
  // The whole batch's loss on this replica's device: logits [rows, 10] and labels [rows] gathered there ->
  // dlogits [rows, 10] (the loss's gradient, scaled by 1 / global_batch: the rows' mean, or the optimiser
  // step's when it accumulates several micro-batches) and the loss sum in the gradient buffer's last slot.
  virtual void batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                          int global_batch);
  // The gradients of the last forward_logits' `count` rows from the d(logits) in shard_buffers().dlogits,
  // into the gradient buffer's parameter slots (the loss slot is left as it is); zeros for count 0.
  virtual void backward_from_dlogits(int count);

  // The loss sum in the gradient buffer (after the all-reduce: of the global batch). May wait for the device.
  virtual float loss_sum() = 0;
  // Whether loss_sum() is a read of host memory that waits for nothing (a CPU replica's): the trainer then
  // checks every step's loss, where a device replica's is checked only when the host reads it anyway.
  virtual bool loss_on_host() const { return false; }
  // Where reading the loss would wait for the device: the replica checks every step's loss (the all-reduced
  // sum) on the device, numbering the steps from next_step (the number, in all, of the next step it is
  // given), and records the first that is not finite. Queued behind the steps already given; waits for
  // nothing. False where the replica keeps no such record.
  virtual bool watch_losses(long /*next_step*/) { return false; }
  // That record as it stood when the replica last waited for its device anyway (loss_sum(), evaluate(), a
  // copy of the parameters or the momentum): the first step whose loss was not finite, or nullopt for none
  // by then. Never waits.
  virtual std::optional<NonFiniteLoss> first_nonfinite_loss() const { return std::nullopt; }

  // Test-set loss and accuracy with the current parameters. Waits for the device.
  virtual EvalResult evaluate() = 0;

  // The timeline (host/training/trace.hpp): record the marks of the next `steps` steps; take_trace returns
  // them, and may wait for the device. On a GPU the marks are CUDA events, anchored to the host's trace
  // clock.
  virtual void trace_steps(long steps) = 0;
  virtual std::vector<StepMarks> take_trace() = 0;
};

}  // namespace mnistdp
