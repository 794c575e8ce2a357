#pragma once
// Every kernel launch of the project goes through this header: `launch<Kernel>(grid, block, shared_bytes,
// stream, args...)` is `Kernel<<<grid, block, shared_bytes, stream>>>(args...)`, checked. One place to launch
// from keeps the checks uniform, and lets the emulated build (docs/emulation.md), whose host compiler has no
// <<< >>>, run the same sources: there the launch goes to the emulator, with the kernel's name for its
// messages.
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch_order.hpp"

namespace mnistdp::cuda::detail {

// The PTX architecture `kernel` was compiled for, as loaded on the current device. Programmatic launches
// rely on the wait of programmatic_launch.cuh, which exists only in code for compute capability 9.0 and
// newer: a build for an older architecture, run on a newer GPU through the driver's compilation, would have
// none.
template <typename... Params>
int kernel_ptx_version(void (*kernel)(Params...)) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.ptxVersion;
}

// Launches with `config`; the status of the launch call itself.
template <auto Kernel, typename... Args>
cudaError_t launch_with(const cudaLaunchConfig_t& config, Args&&... args) {
#if defined(MNISTDP_CUDA_EMULATED)
  return ::mnistdp::emu::launch_named<Kernel>(::mnistdp::emu::spec_from(config), config.stream,
                                              std::forward<Args>(args)...);
#else
  return cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...);
#endif
}

// Throws CudaError for a failed launch, with the runtime's last error cleared (as CUDA_CHECK_LAUNCH leaves
// it), so that it is not reported again by some later, unrelated check.
inline void check_launch(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());
  ::mnistdp::detail::throw_cuda_error("CUDA", cudaGetErrorName(status), cudaGetErrorString(status), expr,
                                      file, line);
}

// Kernel<<<grid, block, shared_bytes, stream>>>(args...), launched in `order`. A programmatic launch of a
// kernel built without the wait throws std::invalid_argument.
template <auto Kernel, typename... Args>
void launch_in_order(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, LaunchOrder order,
                     Args&&... args) {
  if (order == LaunchOrder::programmatic) {
    // Asked once per kernel and process, not at every launch, on the device that launches it first: every
    // device is taken to load code of the same side of 9.0 (true of the default build, sm_90 only; a build
    // whose devices would load code from both sides, such as "80;100" on an H100 beside a B200, is not).
    static const int ptx_version = kernel_ptx_version(Kernel);
    if (ptx_version < 90) {
      throw std::invalid_argument(
          "programmatic launch of a kernel built only for compute capability below 9.0 "
          "(CMAKE_CUDA_ARCHITECTURES): it would not wait for the kernel before it");
    }
  }
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = order == LaunchOrder::programmatic ? &programmatic : nullptr;
  config.numAttrs = order == LaunchOrder::programmatic ? 1 : 0;
  check_launch(launch_with<Kernel>(config, std::forward<Args>(args)...), "a launch of a kernel", __FILE__,
               __LINE__);
}

// Kernel<<<grid, block, shared_bytes, stream>>>(args...), checked.
template <auto Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  launch_in_order<Kernel>(grid, block, shared_bytes, stream, LaunchOrder::serial,
                          std::forward<Args>(args)...);
}

template <typename Kernel>
struct KernelParams;
template <typename... Params>
struct KernelParams<void (*)(Params...)> {
  using Tuple = std::tuple<std::remove_cvref_t<Params>...>;
};

// A cooperative launch of Kernel: every block resident at once, so that the kernel may use grid.sync(). A
// grid larger than what stays resident is refused (cudaErrorCooperativeLaunchTooLarge), as a CudaError.
template <auto Kernel, typename... Args>
void launch_cooperative(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                        Args&&... args) {
#if defined(MNISTDP_CUDA_EMULATED)
  ::mnistdp::emu::LaunchSpec spec;
  spec.grid = grid;
  spec.block = block;
  spec.shared_bytes = shared_bytes;
  spec.cooperative = true;
  check_launch(::mnistdp::emu::launch_named<Kernel>(spec, stream, std::forward<Args>(args)...),
               "a cooperative launch", __FILE__, __LINE__);
#else
  // The parameters as the kernel takes them, each at an address of its own, as the runtime wants them.
  typename KernelParams<decltype(Kernel)>::Tuple values(std::forward<Args>(args)...);
  auto params = std::apply(
      [](auto&... v) { return std::array<void*, sizeof...(v)>{static_cast<void*>(&v)...}; }, values);
  check_launch(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(Kernel), grid, block, params.data(),
                                           shared_bytes, stream),
               "cudaLaunchCooperativeKernel", __FILE__, __LINE__);
#endif
}

}  // namespace mnistdp::cuda::detail
