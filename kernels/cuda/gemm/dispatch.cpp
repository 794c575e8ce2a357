#include <iterator>
#include <stdexcept>
#include <string>

#include "kernels/cuda/gemm/gemm.hpp"

namespace mnistdp::cuda {

void validate(const GemmProblem& p) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("gemm (m " + std::to_string(p.m) + ", n " + std::to_string(p.n) + ", k " +
                                std::to_string(p.k) + "): " + what);
  };
  if (p.m < 0 || p.n < 0 || p.k < 0) fail("negative size");
  if (p.pre_activation && (p.mask || !keeps_pre_activation(p.activation)))
    fail("pre_activation is kept only in a forward epilogue whose activation's derivative reads it");
  if (p.m == 0 || p.n == 0) return;  // nothing is read or written
  if (!p.c) fail("c is null");
  if (p.ldc < p.n) fail("ldc " + std::to_string(p.ldc) + " < n");
  if (p.k == 0) return;  // a and b are not read
  if (!p.a || !p.b) fail("an operand is null");
  if (p.lda < (p.trans_a ? p.m : p.k)) fail("lda " + std::to_string(p.lda) + " too small");
  if (p.ldb < (p.trans_b ? p.k : p.n)) fail("ldb " + std::to_string(p.ldb) + " too small");
}

namespace {

// The launchers, one for each row of kGemmVersions (kernels/cuda/gemm/gemm_version.hpp), in its order.
void launch_cublas(const GemmProblem& p, cudaStream_t stream, cublasHandle_t handle) {
  gemm_cublas(p, handle, stream);
}
template <void (*Launcher)(const GemmProblem&, cudaStream_t)>
void launch_hand_written(const GemmProblem& p, cudaStream_t stream, cublasHandle_t) {
  Launcher(p, stream);
}

using Launch = void (*)(const GemmProblem&, cudaStream_t, cublasHandle_t);
struct Launcher {
  GemmImpl impl;
  Launch launch;
};
constexpr Launcher kLaunchers[] = {
    {GemmImpl::naive, launch_hand_written<gemm_v1_naive>},
    {GemmImpl::tiled, launch_hand_written<gemm_v2_tiled>},
    {GemmImpl::blocked, launch_hand_written<gemm_v3_blocked>},
    {GemmImpl::slab, launch_hand_written<gemm_v4_slab>},
    {GemmImpl::cublas, launch_cublas},
};

constexpr bool every_version_has_its_launcher() {
  if (std::size(kLaunchers) != kGemmVersions.size()) return false;
  for (std::size_t i = 0; i < kGemmVersions.size(); ++i)
    if (kLaunchers[i].impl != kGemmVersions[i].impl) return false;
  return true;
}
static_assert(every_version_has_its_launcher(), "kLaunchers must follow kGemmVersions, row for row");

}  // namespace

void gemm(const GemmProblem& p, GemmImpl impl, cudaStream_t stream, cublasHandle_t handle) {
  const GemmEntry& version = gemm_entry(impl);
  if (version.needs_cublas && !handle)
    throw std::invalid_argument("gemm: --gemm " + std::string(version.name) + " needs a cuBLAS handle");
  for (const Launcher& l : kLaunchers)
    if (l.impl == impl) return l.launch(p, stream, handle);
  throw std::invalid_argument("gemm: unknown GemmImpl");
}

}  // namespace mnistdp::cuda
