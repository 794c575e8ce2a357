#include <stdexcept>
#include <string>

#include "kernels/gemm_cuda.hpp"

namespace mnistdp::cuda {

void validate(const GemmProblem& p) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("gemm (m " + std::to_string(p.m) + ", n " + std::to_string(p.n) + ", k " +
                                std::to_string(p.k) + "): " + what);
  };
  if (p.m < 0 || p.n < 0 || p.k < 0) fail("negative size");
  if (p.m == 0 || p.n == 0) return;  // nothing is read or written
  if (!p.c) fail("c is null");
  if (p.ldc < p.n) fail("ldc " + std::to_string(p.ldc) + " < n");
  if (p.k == 0) return;  // a and b are not read
  if (!p.a || !p.b) fail("an operand is null");
  if (p.lda < (p.trans_a ? p.m : p.k)) fail("lda " + std::to_string(p.lda) + " too small");
  if (p.ldb < (p.trans_b ? p.k : p.n)) fail("ldb " + std::to_string(p.ldb) + " too small");
}

void gemm(const GemmProblem& p, GemmImpl impl, cudaStream_t stream, cublasHandle_t handle) {
  switch (impl) {
    case GemmImpl::naive:
      return gemm_v1_naive(p, stream);
    case GemmImpl::tiled:
      return gemm_v2_tiled(p, stream);
    case GemmImpl::blocked:
      return gemm_v3_blocked(p, stream);
    case GemmImpl::slab:
      return gemm_v4_slab(p, stream);
    case GemmImpl::cublas:
      if (!handle) throw std::invalid_argument("gemm: GemmImpl::cublas needs a cuBLAS handle");
      return gemm_cublas(p, handle, stream);
  }
  throw std::invalid_argument("gemm: unknown GemmImpl");
}

}  // namespace mnistdp::cuda
