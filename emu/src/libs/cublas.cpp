// cuBLAS's single-precision GEMM on the emulated devices. cuBLAS documents no summation order, and picks its
// kernel (tile shapes, split-k) by the shape and the GPU, so the project's tests hold its results to a
// tolerance, never to the bit. This one sums each element of C in another order than the hand-written GEMMs
// (which go along k from 0 with fused multiply-adds), so that a test holding cuBLAS to their bits fails here
// as it would on a GPU: k is split into 2 to 4 contiguous ranges, as a split-k kernel splits it, the number
// drawn from MNISTDP_EMU_SEED and the shape; each range is summed in order with fused multiply-adds and the
// ranges' sums are added last to first. TF32 mode rounds both inputs to TF32 first, as tensor cores do.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu/src/checks/device_addresses.hpp"
#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  int device = 0;
};

namespace {

// Rounds to TF32's 10 explicit mantissa bits, to nearest with ties away from zero (cvt.rna.tf32.f32).
float to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x1000u;  // half of the 13 dropped bits' weight
  bits &= 0xffffe000u;
  float out = 0.0f;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH, device};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_PEDANTIC_MATH && mode != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  // Only host scalars are emulated.
  return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported (emulated cuBLAS)";
    default:
      return "an emulated cuBLAS error";
  }
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b, int m,
                           int n, int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                           const float* beta, float* c, int ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = trans_a == CUBLAS_OP_N ? m : k;
  const int rows_b = trans_b == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *alpha;
  const float be = *beta;
  const bool tf32 = handle->math == CUBLAS_TF32_TENSOR_OP_MATH;
  // The split of k: ranges [split_begin(r), split_begin(r + 1)), as even as k allows.
  const std::uint64_t shape = (static_cast<std::uint64_t>(m) << 42) ^ (static_cast<std::uint64_t>(n) << 21) ^
                              static_cast<std::uint64_t>(k);
  const int splits = std::min(
      k, 2 + static_cast<int>(mnistdp::emu::mix(mnistdp::emu::config().seed ^ 0x63624c53ull, shape) % 3));
  const auto split_begin = [k, splits](int r) {
    return static_cast<int>(static_cast<long>(k) * r / std::max(splits, 1));
  };
  const int device = handle->device;
  mnistdp::emu::Op op;
  op.what = "cublasSgemm";
  op.run = [=] {
    // What the product reads and writes, for the check of races between operations: whole columns, from the
    // first element to the last.
    const auto span = [](int rows, int columns, int ld) {
      return (static_cast<std::size_t>(columns - 1) * ld + rows) * sizeof(float);
    };
    namespace addresses = mnistdp::emu::device_addresses;
    if (k > 0) {
      const std::size_t a_bytes = span(rows_a, trans_a == CUBLAS_OP_N ? k : m, lda);
      const std::size_t b_bytes = span(rows_b, trans_b == CUBLAS_OP_N ? n : k, ldb);
      addresses::library_reaches("cublasSgemm", device, a, a_bytes);
      addresses::library_reaches("cublasSgemm", device, b, b_bytes);
      mnistdp::emu::device_operation_touches("cublasSgemm", a, a_bytes, false);
      mnistdp::emu::device_operation_touches("cublasSgemm", b, b_bytes, false);
    }
    addresses::library_reaches("cublasSgemm", device, c, span(m, n, ldc));
    mnistdp::emu::device_operation_touches("cublasSgemm", c, span(m, n, ldc), true);
    // op(A) [m, k] and op(B) [k, n] copied column-major (rounded to TF32 where asked), so that the loop over
    // a column of C runs along contiguous memory.
    std::vector<float> opa(static_cast<std::size_t>(m) * k);
    std::vector<float> opb(static_cast<std::size_t>(k) * n);
    for (int p = 0; p < k; ++p)
      for (int i = 0; i < m; ++i) {
        const float v =
            trans_a == CUBLAS_OP_N ? a[i + static_cast<long>(p) * lda] : a[p + static_cast<long>(i) * lda];
        opa[static_cast<std::size_t>(p) * m + i] = tf32 ? to_tf32(v) : v;
      }
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) {
        const float v =
            trans_b == CUBLAS_OP_N ? b[p + static_cast<long>(j) * ldb] : b[j + static_cast<long>(p) * ldb];
        opb[static_cast<std::size_t>(j) * k + p] = tf32 ? to_tf32(v) : v;
      }
    std::vector<float> acc(static_cast<std::size_t>(m));
    std::vector<float> part(static_cast<std::size_t>(m));
    for (int j = 0; j < n; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int r = splits - 1; r >= 0; --r) {
        std::fill(part.begin(), part.end(), 0.0f);
        for (int p = split_begin(r); p < split_begin(r + 1); ++p) {
          const float y = opb[static_cast<std::size_t>(j) * k + p];
          const float* col = opa.data() + static_cast<std::size_t>(p) * m;
          for (int i = 0; i < m; ++i)
            part[static_cast<std::size_t>(i)] = std::fma(col[i], y, part[static_cast<std::size_t>(i)]);
        }
        for (int i = 0; i < m; ++i)
          acc[static_cast<std::size_t>(i)] += part[static_cast<std::size_t>(i)];
      }
      float* out = c + static_cast<long>(j) * ldc;
      for (int i = 0; i < m; ++i)  // beta 0: C is not read, as cuBLAS promises
        out[i] = be == 0.0f ? al * acc[static_cast<std::size_t>(i)]
                            : al * acc[static_cast<std::size_t>(i)] + be * out[i];
    }
  };
  auto& engine = mnistdp::emu::Engine::get();
  CUstream_st* stream = nullptr;
  {
    int current = 0;
    static_cast<void>(cudaGetDevice(&current));
    if (current != handle->device) return CUBLAS_STATUS_EXECUTION_FAILED;
    stream = engine.resolve(handle->stream);
  }
  if (engine.enqueue(stream, std::move(op)) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}
