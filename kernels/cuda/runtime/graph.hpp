#pragma once
// RAII owners of CUDA graphs, and the capture of a sequence of launches into one. A graph replays a fixed
// sequence of kernels, copies and collectives with one launch from the host: the kernels' arguments, grids
// and buffers are frozen at capture, so whatever must vary between replays has to be read from device memory.
// Move-only, like the owners in kernels/cuda/runtime/memory.hpp; constructors and captures throw CudaError,
// destructors never throw.
#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

#include "kernels/cuda/runtime/check.hpp"

namespace mnistdp {

// A captured graph (the description: nodes and edges), not yet executable.
class CudaGraph {
 public:
  CudaGraph() = default;
  explicit CudaGraph(cudaGraph_t graph) : graph_(graph) {}
  ~CudaGraph() { release(); }
  CudaGraph(CudaGraph&& other) noexcept : graph_(std::exchange(other.graph_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& other) noexcept {
    if (this != &other) {
      release();
      graph_ = std::exchange(other.graph_, nullptr);
    }
    return *this;
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  cudaGraph_t get() const { return graph_; }
  // The number of nodes (kernels, copies, memsets, collectives' kernels...).
  std::size_t node_count() const;

 private:
  void release() noexcept {
    if (graph_) static_cast<void>(cudaGraphDestroy(graph_));
    graph_ = nullptr;
  }

  cudaGraph_t graph_ = nullptr;
};

// An instantiated graph, ready to launch on a stream of the device it was captured on.
class CudaGraphExec {
 public:
  CudaGraphExec() = default;
  // Instantiates `graph`; the graph may be destroyed afterwards, the executable keeps what it needs.
  explicit CudaGraphExec(const CudaGraph& graph);
  ~CudaGraphExec() { release(); }
  CudaGraphExec(CudaGraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CudaGraphExec& operator=(CudaGraphExec&& other) noexcept {
    if (this != &other) {
      release();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;

  cudaGraphExec_t get() const { return exec_; }
  // Moves the graph's launch resources to the device ahead of its first launch, so that the first replay
  // costs what every later one does.
  void upload(cudaStream_t stream) const { CUDA_CHECK(cudaGraphUpload(exec_, stream)); }
  void launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  void release() noexcept {
    if (exec_) static_cast<void>(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }

  cudaGraphExec_t exec_ = nullptr;
};

// Captures what `enqueue` puts on `stream` into a graph, and returns it; nothing runs on the device. The
// capture is thread-local (cudaStreamCaptureModeThreadLocal): only calls from this thread that are unsafe
// during a capture (cudaMalloc, a synchronous copy...) are refused, so replicas driven from other threads
// may go on launching meanwhile. When `enqueue` throws, the capture is ended and its partial graph dropped
// before the exception travels on, so that the stream is usable again.
CudaGraph capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

}  // namespace mnistdp
