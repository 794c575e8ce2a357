#include "kernels/cuda/runtime/graph.hpp"

namespace mnistdp {

std::size_t CudaGraph::node_count() const {
  std::size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &count));
  return count;
}

CudaGraphExec::CudaGraphExec(const CudaGraph& graph) {
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph.get(), 0));
}

CudaGraph capture_graph(cudaStream_t stream, const std::function<void()>& enqueue) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    if (cudaStreamEndCapture(stream, &broken) == cudaSuccess && broken)
      static_cast<void>(cudaGraphDestroy(broken));
    // A failed capture leaves its error (cudaErrorStreamCaptureInvalidated and the like) as the last error;
    // clear it, so that it does not surface at some later, unrelated check.
    static_cast<void>(cudaGetLastError());
    throw;
  }
  cudaGraph_t graph = nullptr;
  if (const cudaError_t status = cudaStreamEndCapture(stream, &graph); status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // as above: not left for a later check to report
    CUDA_CHECK(status);
  }
  return CudaGraph(graph);
}

}  // namespace mnistdp
