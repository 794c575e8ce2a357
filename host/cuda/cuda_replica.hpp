#pragma once
// A replica of SimpleNet on one CUDA device. Everything it needs lives on that device: the uint8 data set
// (uploaded once), the flat parameter, gradient and momentum buffers, the activations and the epoch's order.
// A training step is a sequence of launches on the replica's stream with no host synchronisation; only
// loss_sum(), evaluate() and the parameter copies wait for the device.
//
// The replica owns the buffers; a step's launches are written once, in its CudaStep (cuda_step.hpp), and when
// they reach the stream (one by one, as CUDA graphs, several steps a graph, a persistent kernel) is a
// StepLaunch of its own (step_launch.hpp), chosen from CudaStepOptions when the replica is made.
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "host/cuda/cuda_step.hpp"
#include "host/cuda/device_timeline.hpp"
#include "host/cuda/step_launch.hpp"
#include "host/model/params.hpp"
#include "host/training/momentum_shard.hpp"
#include "host/training/replica.hpp"
#include "kernels/cuda/gemm/gemm_version.hpp"
#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/cuda/runtime/launch_order.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;  // bytes
  std::size_t free_memory = 0;   // bytes, when listed
  int sm_count = 0;
  int cc_major = 0;  // compute capability, e.g. 9.0 for an H100 or H200
  int cc_minor = 0;
};

// The number of CUDA devices this process sees; 0, with the reason in why_none, when there are none: any
// error from the runtime counts as "no GPU" (without a driver cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver, not cudaErrorNoDevice).
int count_cuda_devices(std::string& why_none);

// The devices `indices` (each below count_cuda_devices()), or every visible device when `indices` is empty.
// Creates a context on each device queried to read its free memory, and on no other: a device not asked for
// is never touched, so that one that fails to answer cannot take the others down. Empty, with why_none
// naming the device and the failing call, when any of them fails to answer.
std::vector<CudaDeviceInfo> list_cuda_devices(const std::vector<int>& indices, std::string& why_none);

// Makes device `index` current and fills `info` from its properties and free memory (which creates its
// context). Returns the first failing status without throwing, and leaves the runtime's last error as the
// failing call left it; when `failed_call` is given, it then names that call ("cudaSetDevice",
// "cudaGetDeviceProperties" or "cudaMemGetInfo"). `info` may be partly filled after a failure.
cudaError_t query_cuda_device(int index, CudaDeviceInfo& info, const char** failed_call = nullptr);

// How a CudaReplica runs a training step.
struct CudaStepOptions {
  GemmImpl gemm = GemmImpl::blocked;
  // Replay each step as a CUDA graph (graph_step.hpp).
  bool cuda_graphs = false;
  // fc2's forward and backward, the loss and fc1's bias gradient in one kernel
  // (kernels/cuda/fused/classifier_head.hpp), for shards small enough for it (cuda::classifier_head_fits);
  // the plain launches otherwise. The same bits as the plain path with every GEMM but cuBLAS.
  bool fused_head = false;
  // The whole step in three kernels (the batch gathered inside fc1's forward product; the classifier head;
  // fc1's weight gradient with every parameter's SGD step), for a lone replica's steps (alone: nothing is
  // all-reduced between the gradients and the SGD step) replayed as graphs (cuda_graphs). The same bits as
  // the plain path with every GEMM but cuBLAS.
  bool fused_step = false;
  // With fused_step: the step's second and third kernels launched programmatically
  // (kernels/cuda/runtime/launch_order.hpp), so that each may be scheduled while the one before finishes.
  // Compute capability 9.0 and newer; the same bits.
  bool programmatic_launch = false;
  // With cuda_graphs, for a lone replica: up to this many consecutive steps replayed as one graph (1: a
  // graph a step). Steps wait on the host until that many are queued or something reads.
  int steps_per_graph = 1;
  // With fused_step, for a lone replica: the queued steps (steps_per_graph at most)
  // launched as one persistent kernel (kernels/cuda/fused/persistent_step.hpp) instead of a graph: its phases
  // a grid-wide barrier apart where the fused step's kernels are a kernel boundary apart. The same bits.
  bool persistent = false;
  // With persistent: the kernel's blocks per SM (1 to the most that stay resident). A device without
  // cooperative launches is refused for a lone replica, where the kernel would run.
  int persistent_blocks_per_sm = 1;
  // With gemm cublas: cuBLAS's products in TF32 on tensor cores (CublasHandle). Not the plain path's
  // results: an option whose accuracy is measured, never the default.
  bool tf32 = false;
  // The only replica of the run (one replica, one process): its steps come whole, through step_alone, and
  // with cuda_graphs run as the whole-step graphs, fused or queued steps and the persistent kernel above.
  // Otherwise step_alone declines, and the fast paths that need a lone replica stand aside.
  bool alone = false;
  // The hidden layer's activation (kernels/ref/activation.hpp), on every path.
  Activation activation = kDefaultActivation;
};

// The way of launching steps that the options ask for (step_launch.hpp).
StepLaunchWay step_launch_way(const CudaStepOptions& options);

class CudaReplica final : public Replica {
 public:
  // Rows per evaluation launch sequence: the test set goes through in chunks of this many rows.
  static constexpr int kEvalChunk = 1024;
  // Activation rows allocated up front (a larger training shard grows them once).
  static constexpr int kInitialRows = 64;

  // Uploads data.train and data.test to device `device` (throws CudaError, or std::invalid_argument for a bad
  // device index or malformed data).
  CudaReplica(const DataSplits& data, int device, const CudaStepOptions& options);
  ~CudaReplica() override;

  std::string description() const override;

  void load_parameters(std::span<const float> params) override;
  void store_parameters(std::span<float> params) override;
  void load_momentum(std::span<const float> momentum) override;
  void store_momentum(std::span<float> momentum) override;
  bool has_momentum() const override { return has_momentum_; }

  void make_epoch_order(std::uint64_t seed, int epoch) override;
  void set_epoch_order(std::span<const std::int32_t> order) override;
  void compute_gradients(int first, int count, int global_batch) override;
  float* gradient_buffer() override;  // device memory, [ParamLayout::kGradCount]
  // On the stream: a device-to-device copy aside, then the in-order sum (kernels/cuda/ops/replica_sum.hpp).
  void keep_gradients() override;
  void add_kept_gradients() override;
  // ZeRO-1: device memory, and the SGD kernel over the shard on this replica's stream; the momentum buffer
  // is made the shard's size at the first call.
  float* parameter_buffer() override;
  void sgd_step_shard(const SgdConfig& cfg, std::size_t first, std::size_t count) override;
  void sgd_step(const SgdConfig& cfg) override;
  // With CudaStepOptions::alone and cuda_graphs, the whole step the way chosen takes it; false otherwise,
  // and for the first step with momentum and traced steps, which run the plain way.
  bool step_alone(int first, int count, const SgdConfig& cfg) override;
  // A lone replica with CUDA graphs: the plain way has nothing to gain from whole steps.
  bool takes_whole_steps() const override { return options_.alone && options_.cuda_graphs; }
  std::optional<DevicePlace> device_place() const override { return DevicePlace{device_, stream_.get()}; }
  // nn.DataParallel's pieces, on this replica's stream: the plain launches whatever the options.
  ShardBuffers shard_buffers(int rows) override;
  void forward_logits(int first, int count) override;
  void batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                  int global_batch) override;
  void backward_from_dlogits(int count) override;
  void no_sgd_step() override;
  float loss_sum() override;
  // Always on: each step's last kernel moves the record on (kernels/cuda/ops/loss_watch.hpp); this numbers
  // the steps.
  bool watch_losses(long next_step) override;
  std::optional<NonFiniteLoss> first_nonfinite_loss() const override;
  EvalResult evaluate() override;
  void trace_steps(long steps) override;
  std::vector<StepMarks> take_trace() override;

  // The device, and the stream every launch of this replica goes on (device_place()). Steps queued by
  // steps_per_graph are not on it until something launches them (gradient_buffer(), loss_sum(), any read):
  // waiting on the stream alone does not wait for them.
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  // Bytes of device memory this replica holds (its buffers; the CUDA context and cuBLAS's workspace aside).
  std::size_t device_bytes() const;

  bool cuda_graphs() const { return options_.cuda_graphs; }
  // The way its steps are launched (step_launch.hpp).
  StepLaunchWay launch_way() const { return step_launch_way(options_); }

  // How the steps ran (step_launch.hpp); zeros without CUDA graphs.
  using GraphCounts = StepGraphCounts;
  // Queued steps count once they are launched.
  GraphCounts graph_counts() const { return launch_->graph_counts(); }
  // Steps whose gradients were enqueued with the fused classifier head (launched, or captured into a graph).
  long fused_head_steps() const { return step_->counts().head_steps; }
  // Whole steps enqueued as the fused step's three kernels (launched, or captured into a graph).
  long fused_steps() const { return step_->counts().fused_steps; }
  // Whole steps run by the persistent kernel, and its launches.
  long persistent_steps() const { return step_->counts().persistent_steps; }
  long persistent_launches() const { return step_->counts().persistent_launches; }

 private:
  void activate() const;
  // Before anything reads or changes what the steps change (parameters, momentum, gradients, the loss, the
  // order, the activations): the device made current and every step kept back put on the stream.
  void prepare_access();
  // The way that takes a step given in two calls (compute_gradients, sgd_step): the chosen way's, or the
  // plain way's for traced steps (their marks go between launches) and a lone replica's (whose graphs hold
  // whole steps), once the chosen way has launched what it kept back.
  StepLaunch& two_call_launch();
  cuda::LaunchOrder fused_order() const {
    return options_.programmatic_launch ? cuda::LaunchOrder::programmatic : cuda::LaunchOrder::serial;
  }
  bool tracing() const { return timeline_.tracing(); }
  // Throws where rows [first, first + count) are not a shard of the training set (`who` names the call).
  void check_rows(int first, int count, const char* who) const;
  // Grows the activations to `rows` if they are smaller (which drops the step graphs: they hold the old
  // addresses).
  void ensure_rows(int rows);
  // This replica's buffers, as its CudaStep launches on them.
  StepView step_view();
  // Waits for the stream, bringing a copy of the loss record along: every wait the host makes anyway
  // refreshes what first_nonfinite_loss() says, and none is made for it alone.
  void synchronize();

  const CudaStepOptions options_;  // as made; everything else about how it steps follows from them
  int device_;
  // The device's most blocks per SM for the persistent kernel (queried with persistent); 0: no cooperative
  // launches.
  int persistent_most_blocks_per_sm_ = 0;
  std::string device_name_;
  int cc_major_ = 0;
  int cc_minor_ = 0;
  int sm_count_ = 0;

  Stream stream_;
  std::optional<CublasHandle> cublas_;

  int train_count_ = 0;
  int test_count_ = 0;
  DeviceBuffer<std::uint8_t> train_images_;  // [train_count, 784]
  DeviceBuffer<std::uint8_t> train_labels_;  // [train_count]
  DeviceBuffer<std::uint8_t> test_images_;   // [test_count, 784]
  DeviceBuffer<std::uint8_t> test_labels_;   // [test_count]
  DeviceBuffer<std::int32_t> test_rows_;     // [test_count]: 0, 1, 2, ... (the test set's "order")
  DeviceBuffer<std::int32_t> order_;         // [train_count]: this epoch's permutation
  bool order_set_ = false;
  // make_epoch_order's: the rows' sort keys, and Thrust's temporaries, allocated by the constructor's first
  // sort and kept (the evaluation's reductions reuse them).
  DeviceBuffer<std::uint64_t> order_keys_;  // [train_count]
  ThrustScratch thrust_scratch_;
  // set_epoch_order's way to order_: page-locked copies, two used in turn. A copy from pinned memory is
  // queued without waiting (from pageable memory the driver may wait for the stream first), so the next
  // epoch's order can be queued behind this epoch's steps. A staging buffer is written again only after the
  // copy that read it, two orders back, has run (order_copied_).
  std::array<PinnedBuffer<std::int32_t>, 2> order_staging_;  // [train_count] each
  std::array<std::optional<Event>, 2> order_copied_;
  int order_slot_ = 0;  // the staging buffer the next order goes through

  DeviceBuffer<float> params_;      // [ParamLayout::kCount]
  DeviceBuffer<float> grads_;       // [ParamLayout::kGradCount], the loss sum in the last slot
  DeviceBuffer<float> kept_grads_;  // [ParamLayout::kGradCount] once keep_gradients has run
  // {grads_, kept_grads_}: the table of buffers add_kept_gradients sums, in device memory.
  DeviceBuffer<const float*> kept_sum_table_;
  DeviceBuffer<float> momentum_;  // [shard_.count()]: the parameters' from shard_.first() on
  bool has_momentum_ = false;
  MomentumShard shard_;  // the whole buffer but under ZeRO-1 (sgd_step_shard)

  // Every step's loss checked on the device: the record (moved on by each step's last kernel), its copy's
  // landing place, and the record as the host last saw it.
  DeviceBuffer<cuda::LossWatch> loss_watch_;  // [1]
  PinnedBuffer<cuda::LossWatch> host_watch_;  // [1]
  cuda::LossWatch seen_watch_;

  int rows_ = 0;                  // capacity of the activations, in rows
  DeviceBuffer<float> x_;         // [rows, 784]
  DeviceBuffer<std::uint8_t> y_;  // [rows]
  DeviceBuffer<float> h_;         // [rows, 256], after the activation
  DeviceBuffer<float> z_;         // [rows, 256], before it, where its derivative reads that; else empty
  DeviceBuffer<float> dh_;        // [rows, 256]
  DeviceBuffer<float> logits_;    // [rows, 10]
  DeviceBuffer<float> dlogits_;   // [rows, 10]

  DeviceBuffer<int> cursor_;  // [1]: where the next step read from it has its rows in order_

  DeviceBuffer<float> eval_loss_;            // [chunks]: each chunk's loss sum
  DeviceBuffer<std::uint8_t> eval_correct_;  // [test_count]: 1 where the row's argmax is its label
  PinnedBuffer<float> host_loss_;            // [1]

  DeviceTimeline timeline_;  // the traced steps' marks, recorded by the step's launches

  // Every launch of a step, on the buffers above; and how steps reach the stream, made from the options and
  // never changed. Made last.
  std::optional<CudaStep> step_;
  std::unique_ptr<StepLaunch> launch_;
  std::unique_ptr<StepLaunch> plain_;  // traced steps, and a lone replica's steps in two calls
};

std::unique_ptr<Replica> make_cuda_replica(const DataSplits& data, int device,
                                           const CudaStepOptions& options);

}  // namespace mnistdp
