#pragma once
// ref::normalize_pixel on the device, shared by the gather and the fused step's first kernel so that both
// produce the same x. CUDA-only (included by .cu files alone).
namespace mnistdp::cuda::detail {

// (p / 255 - 0.5) / 0.5, written with round-to-nearest intrinsics: they pin the three operations and their
// order, so that neither contraction nor a reciprocal can make the result differ from the CPU's by an ulp
// (the batch must be equal to the bit).
__device__ __forceinline__ float normalize_pixel(unsigned p) {
  return __fdiv_rn(__fsub_rn(__fdiv_rn(static_cast<float>(p), 255.0f), 0.5f), 0.5f);
}

}  // namespace mnistdp::cuda::detail
