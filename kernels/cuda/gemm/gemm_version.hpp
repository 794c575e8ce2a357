#pragma once
// The matrix-product versions behind the CUDA linear layers, in one table: the command line's choices, their
// parsing, the tests' and the benchmarks' lists all read it. No CUDA here (the command line is built without
// it); each version's launcher sits beside it in kernels/cuda/gemm/dispatch.cpp, one entry per row below.
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mnistdp {

// The hand-written versions stay in the tree, numbered in the order a reader should read them; cuBLAS is the
// reference they are measured against.
enum class GemmImpl { naive, tiled, blocked, slab, cublas };

struct GemmEntry {
  GemmImpl impl;
  std::string_view name;         // what --gemm takes, and the benchmarks' and tests' label
  std::string_view description;  // a few words for --help
  std::string_view source;       // the file that holds it
  // Sums each element over k in the hand-written versions' common order, so that every such version gives the
  // same bits (tests/gpu/test_linear_cuda.cpp checks it); cuBLAS documents no order.
  bool common_bits;
  bool needs_cublas;  // needs a cuBLAS handle (CudaReplica makes one)
};

// Adding a version: its kernel file, one row here, one launcher in dispatch.cpp's table, the file in
// kernels/CMakeLists.txt (docs/kernels.md, "Adding a matrix-product version"). The table's size is the count
// of its rows, so that a row is all a new version adds here.
inline constexpr auto kGemmVersions = std::to_array<GemmEntry>({
    {GemmImpl::naive, "naive", "one thread an element", "kernels/cuda/gemm/v1_naive.cu", true, false},
    {GemmImpl::tiled, "tiled", "shared-memory tiles", "kernels/cuda/gemm/v2_tiled.cu", true, false},
    {GemmImpl::blocked, "blocked", "register-blocked", "kernels/cuda/gemm/v3_blocked.cu", true, false},
    {GemmImpl::slab, "slab", "small tiles, long k slabs", "kernels/cuda/gemm/v4_slab.cu", true, false},
    {GemmImpl::cublas, "cublas", "cuBLAS, for comparison", "kernels/cuda/gemm/cublas.cu", false, true},
});

constexpr const GemmEntry& gemm_entry(GemmImpl impl) {
  for (const GemmEntry& v : kGemmVersions)
    if (v.impl == impl) return v;
  throw std::invalid_argument("gemm_entry: a GemmImpl without a row in kGemmVersions");
}

constexpr std::string_view gemm_impl_name(GemmImpl impl) {
  return gemm_entry(impl).name;
}

// Every version's name, in the table's order: the command line's choices.
inline std::vector<std::string> gemm_names() {
  std::vector<std::string> names;
  for (const GemmEntry& v : kGemmVersions)
    names.emplace_back(v.name);
  return names;
}

// "naive, tiled, blocked, slab or cublas"; with descriptions, "naive (one thread an element), ... or cublas
// (cuBLAS, for comparison)", as --gemm's help says it.
inline std::string gemm_names_text(bool with_descriptions = false) {
  std::string text;
  for (std::size_t i = 0; i < kGemmVersions.size(); ++i) {
    if (i > 0) text += i + 1 == kGemmVersions.size() ? " or " : ", ";
    text += kGemmVersions[i].name;
    if (with_descriptions) text += " (" + std::string(kGemmVersions[i].description) + ")";
  }
  return text;
}

// The version named `name`; anything else throws std::invalid_argument listing the choices.
inline GemmImpl parse_gemm_impl(std::string_view name) {
  for (const GemmEntry& v : kGemmVersions)
    if (v.name == name) return v.impl;
  throw std::invalid_argument("unknown GEMM implementation '" + std::string(name) + "': choose " +
                              gemm_names_text());
}

// The versions that give the common bits (every hand-written one): the tests compare them with each other.
inline std::vector<GemmImpl> gemms_with_common_bits() {
  std::vector<GemmImpl> out;
  for (const GemmEntry& v : kGemmVersions)
    if (v.common_bits) out.push_back(v.impl);
  return out;
}

// Every version, in the table's order.
inline std::vector<GemmImpl> all_gemms() {
  std::vector<GemmImpl> out;
  for (const GemmEntry& v : kGemmVersions)
    out.push_back(v.impl);
  return out;
}

}  // namespace mnistdp
