#pragma once
// How a kernel is launched under emulation: the arguments are copied once at the launch (as the GPU copies
// them to the parameter space), and every emulated thread calls the kernel with its own copy of them, as a
// GPU thread has its own parameter registers.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu/errors.hpp"
#include "emu/types.hpp"

struct CUstream_st;
struct cudaFuncAttributes;

namespace mnistdp::emu {

struct LaunchSpec {
  const char* name = "kernel";
  // Its address, by which its resources are found (emu/src/runtime/resources.hpp).
  const void* kernel = nullptr;
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
  bool cooperative = false;
  bool programmatic = false;
  int device = 0;  // the launch's stream's: set when it is enqueued
  // The launch's parameter space: the kernel and its arguments as the launch copied them, which every
  // emulated thread reads (and the check of a kernel's host addresses allows). Set when it is enqueued.
  const void* parameters = nullptr;
  std::size_t parameter_bytes = 0;
};

// What a launch copies: the kernel and its arguments.
template <typename... Params>
struct FrozenLaunch {
  void (*kernel)(Params...);
  std::tuple<std::remove_cvref_t<Params>...> args;
};

// Marks where the kernel's own code runs, for the check of its host addresses
// (emu/src/checks/device_addresses.hpp), apart from the emulator's code around it and in its builtins.
// Returns the mark before.
bool kernel_code(bool running_kernel);

// One emulated thread's run of a frozen launch. The kernel's own code reads nothing of the launch but
// `parameters` (the inner closure lives on the thread's stack), so that the check of host addresses knows
// every byte it may read.
template <typename Frozen>
void run_frozen_launch(const void* parameters) {
  struct KernelCode {
    bool was = kernel_code(true);
    ~KernelCode() { kernel_code(was); }
  } const kernel;
  const Frozen& frozen = *static_cast<const Frozen*>(parameters);
  std::apply([&frozen](const auto&... a) { frozen.kernel(a...); }, frozen.args);
}

// Enqueues the launch on `stream`: each emulated thread calls `thread_body(parameters)`, and `parameters`
// (`parameter_bytes` long) lives as long as the launch. Returns the launch's own error (a bad
// configuration); a fault inside the kernel is reported by later synchronising calls.
cudaError_t enqueue_launch(const LaunchSpec& spec, CUstream_st* stream, void (*thread_body)(const void*),
                           std::shared_ptr<const void> parameters, std::size_t parameter_bytes);

template <typename... Params, typename... Args>
cudaError_t launch(const LaunchSpec& spec, CUstream_st* stream, void (*kernel)(Params...), Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a kernel launch needs one argument per parameter");
  using Frozen = FrozenLaunch<Params...>;
  auto frozen = std::make_shared<const Frozen>(
      Frozen{kernel, {static_cast<std::remove_cvref_t<Params>>(std::forward<Args>(args))...}});
  LaunchSpec with_kernel = spec;
  with_kernel.kernel = reinterpret_cast<const void*>(kernel);
  return enqueue_launch(with_kernel, stream, &run_frozen_launch<Frozen>, std::move(frozen), sizeof(Frozen));
}

// The name of a kernel known at compile time, from the compiler's own spelling of the template argument.
template <auto Kernel>
const char* kernel_name() {
  // "const char* mnistdp::emu::kernel_name() [with auto Kernel = ns::the_kernel<true>]": the part after "= ".
  static const std::string name = [pretty = std::string_view(__PRETTY_FUNCTION__)] {
    const std::string_view key = "Kernel = ";
    const std::size_t at = pretty.find(key);
    if (at == std::string_view::npos) return std::string(pretty);
    std::string_view rest = pretty.substr(at + key.size());
    const std::size_t end = rest.find_first_of(";]");
    return std::string(rest.substr(0, end));
  }();
  return name.c_str();
}

// The name of a kernel given by address alone: its symbol where the executable exports one.
const char* kernel_name_of(const void* kernel);

// Launches Kernel by name; what the project's launch function calls in the emulated build.
template <auto Kernel, typename... Args>
cudaError_t launch_named(LaunchSpec spec, CUstream_st* stream, Args&&... args) {
  spec.name = kernel_name<Kernel>();
  return launch(spec, stream, Kernel, std::forward<Args>(args)...);
}

// What the GPU build's ptxas reports of one kernel for sm_90 (emu/cmake/kernel_resources.cmake writes them,
// and each .cu file of the emulated build registers its own): the emulated launches are held to these.
struct KernelResources {
  const char* symbol;         // the kernel's name as nvcc mangles it
  int registers;              // a thread's
  int barriers;               // the block's named barriers, __syncthreads()'s included
  std::size_t static_shared;  // bytes of shared memory declared in the kernel, a block's
  std::size_t stack;          // bytes of stack frame, a thread's (cudaFuncAttributes::localSizeBytes)
  int max_threads;            // the threads of its __launch_bounds__ (PTX .maxntid); 0: none given
};
// Called by each .cu file's figures as the program starts; returns true.
bool register_kernel_resources(const char* source, const KernelResources* kernels, std::size_t count);

cudaError_t function_attributes(cudaFuncAttributes* attributes, const void* kernel);
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);
cudaError_t max_active_blocks_per_sm(int* blocks, const void* kernel, int block_size,
                                     std::size_t shared_bytes);

}  // namespace mnistdp::emu
