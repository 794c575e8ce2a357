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
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
  bool cooperative = false;
  bool programmatic = false;
};

// Enqueues the launch on `stream`: `thread_body` is called once by each emulated thread. Returns the
// launch's own error (a bad configuration); a fault inside the kernel is reported by later synchronising
// calls.
cudaError_t enqueue_launch(const LaunchSpec& spec, CUstream_st* stream, std::function<void()> thread_body);

template <typename... Params, typename... Args>
cudaError_t launch(const LaunchSpec& spec, CUstream_st* stream, void (*kernel)(Params...), Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a kernel launch needs one argument per parameter");
  auto frozen = std::make_shared<const std::tuple<std::remove_cvref_t<Params>...>>(
      static_cast<std::remove_cvref_t<Params>>(std::forward<Args>(args))...);
  return enqueue_launch(
      spec, stream, [kernel, frozen] { std::apply([kernel](const auto&... a) { kernel(a...); }, *frozen); });
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

cudaError_t function_attributes(cudaFuncAttributes* attributes);
cudaError_t max_active_blocks_per_sm(int* blocks, int block_size, std::size_t shared_bytes);

}  // namespace mnistdp::emu
