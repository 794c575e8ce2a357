#pragma once
// Checks for every CUDA, cuBLAS and NCCL call: a failure throws CudaError naming the file, the line, the call
// and the library's own message. Library code never exits; the error travels up to main, which prints it.
//
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   CUDA_CHECK_LAUNCH();  // after a launch not made through kernels/cuda/runtime/launch.cuh, which checks
//   its own
//
// NCCL_CHECK expands to ncclSuccess and ncclGetErrorString, so it needs <nccl.h> where it is used; this
// header does not include it, so that code without NCCL need not link it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace mnistdp {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// library: "CUDA", "cuBLAS" or "NCCL"; name: the error's enumerator (nullptr where the library has no such
// function); message: the library's description of the error; expr: the call as written.
[[noreturn]] void throw_cuda_error(const char* library, const char* name, const char* message,
                                   const char* expr, const char* file, int line);

}  // namespace detail
}  // namespace mnistdp

#define CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                     \
    const cudaError_t mnistdp_status_ = (expr);                                                            \
    if (mnistdp_status_ != cudaSuccess)                                                                    \
      ::mnistdp::detail::throw_cuda_error("CUDA", cudaGetErrorName(mnistdp_status_),                       \
                                          cudaGetErrorString(mnistdp_status_), #expr, __FILE__, __LINE__); \
  } while (false)

#define CUBLAS_CHECK(expr)                                                                         \
  do {                                                                                             \
    const cublasStatus_t mnistdp_status_ = (expr);                                                 \
    if (mnistdp_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::mnistdp::detail::throw_cuda_error("cuBLAS", cublasGetStatusName(mnistdp_status_),          \
                                          cublasGetStatusString(mnistdp_status_), #expr, __FILE__, \
                                          __LINE__);                                               \
  } while (false)

#define NCCL_CHECK(expr)                                                                               \
  do {                                                                                                 \
    const ncclResult_t mnistdp_status_ = (expr);                                                       \
    if (mnistdp_status_ != ncclSuccess)                                                                \
      ::mnistdp::detail::throw_cuda_error("NCCL", nullptr, ncclGetErrorString(mnistdp_status_), #expr, \
                                          __FILE__, __LINE__);                                         \
  } while (false)

// After every kernel launch: catches launch-configuration errors at once. (Faults inside a kernel surface at
// the next synchronising call, which is checked too.)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
