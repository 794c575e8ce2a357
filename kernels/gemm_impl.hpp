#pragma once
// Which matrix-product implementation the CUDA linear layers use. No CUDA here: the command line names it.
#include <string_view>

namespace mnistdp {

// The hand-written versions stay in the tree, numbered in the order a reader should read them
// (gemm_v1_naive.cu, gemm_v2_tiled.cu, gemm_v3_blocked.cu, gemm_v4_slab.cu); cuBLAS is the reference they
// are measured against.
enum class GemmImpl { naive, tiled, blocked, slab, cublas };

constexpr std::string_view gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::naive:
      return "naive";
    case GemmImpl::tiled:
      return "tiled";
    case GemmImpl::blocked:
      return "blocked";
    case GemmImpl::slab:
      return "slab";
    case GemmImpl::cublas:
      return "cublas";
  }
  return "unknown";
}

}  // namespace mnistdp
