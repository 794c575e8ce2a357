#pragma once
// RAII owners of CUDA resources: device and pinned host memory, streams, events and cuBLAS handles.
// Each is move-only; constructors throw CudaError, destructors never throw (a failed free at exit, when the
// driver is already shutting down, is not worth a crash).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>

#include "kernels/cuda/runtime/check.hpp"

namespace mnistdp {

// count elements of T in device memory, uninitialised. Allocates on the current device.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;  // cudaMalloc(0) is legal but gives nothing worth owning
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
  }
  ~DeviceBuffer() { release(); }

  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }

 private:
  void release() noexcept {
    if (ptr_) static_cast<void>(cudaFree(ptr_));
    ptr_ = nullptr;
    count_ = 0;
  }

  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// count elements of T in page-locked host memory: the staging area of truly asynchronous copies.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
  }
  ~PinnedBuffer() { release(); }

  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::span<T> span() { return {ptr_, count_}; }
  std::span<const T> span() const { return {ptr_, count_}; }

 private:
  void release() noexcept {
    if (ptr_) static_cast<void>(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    count_ = 0;
  }

  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// A non-blocking stream on the current device: it does not serialise with the legacy default stream, so every
// copy that must be ordered with its kernels has to be issued on it (cudaMemcpyAsync(..., stream.get())).
class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (stream_) static_cast<void>(cudaStreamDestroy(stream_));
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      if (stream_) static_cast<void>(cudaStreamDestroy(stream_));
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// flags: cudaEventDefault to time with it, cudaEventDisableTiming when it only orders streams.
class Event {
 public:
  explicit Event(unsigned flags = cudaEventDefault) { CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags)); }
  ~Event() {
    if (event_) static_cast<void>(cudaEventDestroy(event_));
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      if (event_) static_cast<void>(cudaEventDestroy(event_));
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }
  // Milliseconds from start to this event; both must have completed.
  float elapsed_ms_since(const Event& start) const {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// A cuBLAS handle bound to the current device and to one stream, in plain fp32 by default:
// CUBLAS_DEFAULT_MATH never uses TF32 tensor cores for cublasSgemm, which is what PyTorch does by default
// (allow_tf32 = False for matmul). tf32: CUBLAS_TF32_TENSOR_OP_MATH, which lets cublasSgemm round its inputs
// to TF32 (10 bits of mantissa) and multiply them on tensor cores, summing in fp32 (allow_tf32 = True).
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream, bool tf32 = false) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    try {
      CUBLAS_CHECK(cublasSetStream(handle_, stream));
      CUBLAS_CHECK(cublasSetMathMode(handle_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
      CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    } catch (...) {
      static_cast<void>(cublasDestroy(handle_));
      throw;
    }
  }
  ~CublasHandle() {
    if (handle_) static_cast<void>(cublasDestroy(handle_));
  }
  CublasHandle(CublasHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& other) noexcept {
    if (this != &other) {
      if (handle_) static_cast<void>(cublasDestroy(handle_));
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace mnistdp
