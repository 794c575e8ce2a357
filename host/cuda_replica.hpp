#pragma once
// A replica of SimpleNet on one CUDA device. Everything it needs lives on that device: the uint8 data set
// (uploaded once), the flat parameter, gradient and momentum buffers, the activations and the epoch's order.
// A training step is a sequence of launches on the replica's stream with no host synchronisation; only
// loss_sum(), evaluate() and the parameter copies wait for the device.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "host/replica.hpp"
#include "kernels/cuda_memory.hpp"
#include "kernels/gemm_impl.hpp"
#include "kernels/linear_cuda.hpp"
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

// The CUDA devices this process can use. Empty, with the reason in why_none, when there are none: any error
// from the runtime counts as "no GPU" (without a driver cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver, not cudaErrorNoDevice). Creates a context on each device to read its free
// memory.
std::vector<CudaDeviceInfo> list_cuda_devices(std::string& why_none);

// "naive", "tiled", "blocked" or "cublas"; anything else throws std::invalid_argument listing the choices.
GemmImpl parse_gemm_impl(const std::string& name);

class CudaReplica final : public Replica {
 public:
  // Rows per evaluation launch sequence: the test set goes through in chunks of this many rows.
  static constexpr int kEvalChunk = 1024;
  // Activation rows allocated up front (a larger training shard grows them once).
  static constexpr int kInitialRows = 64;

  // Uploads data.train and data.test to device `device` (throws CudaError, or std::invalid_argument for a bad
  // device index or malformed data).
  CudaReplica(const DataSplits& data, int device, GemmImpl gemm);
  ~CudaReplica() override;

  std::string description() const override;

  void load_parameters(std::span<const float> params) override;
  void store_parameters(std::span<float> params) const override;
  void load_momentum(std::span<const float> momentum) override;
  void store_momentum(std::span<float> momentum) const override;
  bool has_momentum() const override { return has_momentum_; }

  void set_epoch_order(std::span<const std::int32_t> order) override;
  void compute_gradients(int first, int count, int global_batch) override;
  float* gradient_buffer() override { return grads_.data(); }  // device memory, [ParamLayout::kGradCount]
  void sgd_step(const SgdConfig& cfg) override;
  float loss_sum() override;
  EvalResult evaluate() override;
  void trace_steps(long steps) override;
  std::vector<StepMarks> take_trace() override;

  // For the communicator: the device, and the stream every launch of this replica goes on (an all-reduce of
  // gradient_buffer() must be ordered on it, after compute_gradients and before sgd_step).
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  // Bytes of device memory this replica holds (its buffers; the CUDA context and cuBLAS's workspace aside).
  std::size_t device_bytes() const;

 private:
  // Makes this replica's device current on the calling thread (the trainer may drive replicas from threads).
  void activate() const;
  void ensure_rows(int rows);
  cuda::GemmContext gemm_context() const;
  // The forward pass of rows already gathered into x_ (and y_): h_ and logits_.
  void forward(int rows);
  // Records a timeline mark on the stream while steps are being traced.
  void mark(Mark m);

  int device_;
  GemmImpl gemm_;
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

  DeviceBuffer<float> params_;    // [ParamLayout::kCount]
  DeviceBuffer<float> grads_;     // [ParamLayout::kGradCount], the loss sum in the last slot
  DeviceBuffer<float> momentum_;  // [ParamLayout::kCount]
  bool has_momentum_ = false;

  int rows_ = 0;                  // capacity of the activations, in rows
  DeviceBuffer<float> x_;         // [rows, 784]
  DeviceBuffer<std::uint8_t> y_;  // [rows]
  DeviceBuffer<float> h_;         // [rows, 256], after the ReLU
  DeviceBuffer<float> dh_;        // [rows, 256]
  DeviceBuffer<float> logits_;    // [rows, 10]
  DeviceBuffer<float> dlogits_;   // [rows, 10]

  DeviceBuffer<float> eval_loss_;   // [chunks]: each chunk's loss sum
  DeviceBuffer<int> eval_correct_;  // [chunks]
  PinnedBuffer<float> host_loss_;   // [max(1, chunks)]
  PinnedBuffer<int> host_correct_;  // [chunks]

  // The timeline: kMarksPerStep events per traced step, timed against an anchor whose host time is known.
  long trace_remaining_ = 0;
  long traced_steps_ = 0;
  std::vector<Event> trace_events_;
  std::optional<Event> trace_anchor_;
  double trace_anchor_us_ = 0.0;
};

std::unique_ptr<Replica> make_cuda_replica(const DataSplits& data, int device, GemmImpl gemm);

}  // namespace mnistdp
