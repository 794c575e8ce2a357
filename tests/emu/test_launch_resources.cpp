// The emulated launch is held to an H200's resources, counted from the GPU build's ptxas report of each
// kernel (emu/src/runtime/resources.hpp, docs/emulation.md "Launch resources"): shared memory past 48 KiB
// without cudaFuncSetAttribute, a block above __launch_bounds__, and a kernel with no figures are refused as
// a GPU refuses them; cudaFuncGetAttributes gives ptxas's figures; and the occupancy of every kernel of the
// program is what the toolkit's own occupancy calculator (cuda_occupancy.h) gives for compute capability 9.0.
#include <cuda_occupancy.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "emu/src/runtime/resources.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "tests/emu/resource_kernels.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace mnistdp {
namespace {

using Catch::Matchers::Contains;
using gpu_test::to_host;
namespace resources = emu::resources;

std::string last_error_message(cudaError_t code) {
  static_cast<void>(cudaGetLastError());
  return cudaGetErrorString(code);
}

// An H200 as the occupancy calculator describes a device (cudaGetDeviceProperties on one gives these).
cudaOccDeviceProp h200() {
  cudaOccDeviceProp p;
  p.computeMajor = 9;
  p.computeMinor = 0;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.numSms = 132;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.reservedSharedMemPerBlock = 1024;
  return p;
}

// The calculator's blocks a SM for a kernel of these figures, as cudaFuncGetAttributes would describe it
// with its dynamic shared memory limit at `max_dynamic`.
int calculator_blocks(const emu::KernelResources& figures, int block_threads, std::size_t dynamic,
                      std::size_t max_dynamic) {
  cudaOccFuncAttributes f;
  f.maxThreadsPerBlock = resources::max_threads_per_block(figures);
  f.numRegs = figures.registers;
  f.sharedSizeBytes = figures.static_shared;
  f.partitionedGCConfig = PARTITIONED_GC_OFF;
  f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  f.maxDynamicSharedSizeBytes = max_dynamic;
  f.numBlockBarriers = figures.barriers;
  const cudaOccDeviceProp device = h200();
  const cudaOccDeviceState state;
  cudaOccResult result{};
  REQUIRE(cudaOccMaxActiveBlocksPerMultiprocessor(&result, &device, &f, &state, block_threads, dynamic) ==
          CUDA_OCC_SUCCESS);
  return result.activeBlocksPerMultiprocessor;
}

// The dynamic shared memory a kernel's block may have without cudaFuncSetAttribute: 48 KiB in all.
std::size_t default_dynamic_limit(const emu::KernelResources& figures) {
  return 48 * 1024 - std::min<std::size_t>(48 * 1024, figures.static_shared);
}

const resources::Kernel& registered_kernel(const std::string& name) {
  static const std::vector<resources::Kernel> kernels = resources::registered();
  const auto it = std::find_if(kernels.begin(), kernels.end(), [&](const resources::Kernel& k) {
    return k.name.find(name) != std::string::npos;
  });
  REQUIRE(it != kernels.end());
  return *it;
}

TEST_CASE("static and dynamic shared memory past 48 KiB fail to launch until cudaFuncSetAttribute raises it",
          "[emu]") {
  cudaFuncAttributes attributes{};
  REQUIRE(emu_test::static_and_dynamic_shared_attributes(&attributes) == cudaSuccess);
  CHECK(attributes.sharedSizeBytes == emu_test::kStaticSharedBytes);  // ptxas's figure
  const std::size_t room = 48 * 1024 - emu_test::kStaticSharedBytes;
  CHECK(attributes.maxDynamicSharedSizeBytes == static_cast<int>(room));
  DeviceBuffer<float> out(1);
  Stream s;

  // Up to 48 KiB in all: launched.
  REQUIRE(emu_test::launch_static_and_dynamic_shared(out.data(), room, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(to_host(out)[0] == 3.0f);

  // 4 bytes more: refused, as an H200 refuses it.
  CHECK(emu_test::launch_static_and_dynamic_shared(out.data(), room + 4, s.get()) == cudaErrorInvalidValue);
  CHECK_THAT(last_error_message(cudaErrorInvalidValue), Contains("48 KiB"));

  // Raised to 20 KiB: launched with 60 KiB in all, and refused past the raised limit.
  const int raised = 20 * 1024;
  REQUIRE(emu_test::raise_dynamic_shared_limit(raised) == cudaSuccess);
  REQUIRE(emu_test::static_and_dynamic_shared_attributes(&attributes) == cudaSuccess);
  CHECK(attributes.maxDynamicSharedSizeBytes == raised);
  REQUIRE(emu_test::launch_static_and_dynamic_shared(out.data(), raised, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(to_host(out)[0] == 3.0f);
  CHECK(emu_test::launch_static_and_dynamic_shared(out.data(), raised + 4, s.get()) == cudaErrorInvalidValue);
  CHECK_THAT(last_error_message(cudaErrorInvalidValue),
             Contains("cudaFuncAttributeMaxDynamicSharedMemorySize"));

  // No block has more than 227 KiB.
  const int most = static_cast<int>(227 * 1024 - emu_test::kStaticSharedBytes);
  CHECK(emu_test::raise_dynamic_shared_limit(most) == cudaSuccess);
  CHECK(emu_test::raise_dynamic_shared_limit(most + 1) == cudaErrorInvalidValue);
  static_cast<void>(cudaGetLastError());

  // A reset forgets the attribute, as a new context has none.
  REQUIRE(cudaDeviceReset() == cudaSuccess);
  CHECK(emu_test::launch_static_and_dynamic_shared(out.data(), raised, s.get()) == cudaErrorInvalidValue);
  static_cast<void>(cudaGetLastError());
}

TEST_CASE("a block larger than the kernel's __launch_bounds__ is refused", "[emu]") {
  cudaFuncAttributes attributes{};
  REQUIRE(emu_test::bounded_attributes(&attributes) == cudaSuccess);
  CHECK(attributes.maxThreadsPerBlock == emu_test::kBoundedThreads);
  CHECK(attributes.numRegs == registered_kernel("bounded_kernel").figures.registers);
  CHECK(attributes.numRegs > 0);
  DeviceBuffer<float> out(2 * emu_test::kBoundedThreads);
  Stream s;
  REQUIRE(emu_test::launch_bounded(out.data(), emu_test::kBoundedThreads, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(emu_test::launch_bounded(out.data(), 2 * emu_test::kBoundedThreads, s.get()) ==
        cudaErrorLaunchOutOfResources);
  CHECK_THAT(last_error_message(cudaErrorLaunchOutOfResources), Contains("__launch_bounds__"));
  int blocks = -1;
  REQUIRE(emu_test::bounded_occupancy(&blocks, 2 * emu_test::kBoundedThreads) == cudaSuccess);
  CHECK(blocks == 0);
}

void not_a_registered_kernel(float* out) {
  out[0] = 1.0f;
}

TEST_CASE("a kernel that ptxas reported nothing of is refused rather than launched on assumed figures",
          "[emu]") {
  DeviceBuffer<float> out(1);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  CHECK(cudaLaunchKernelEx(&config, not_a_registered_kernel, out.data()) == cudaErrorInvalidDeviceFunction);
  CHECK_THAT(last_error_message(cudaErrorInvalidDeviceFunction), Contains("no ptxas figures"));
  cudaFuncAttributes attributes{};
  CHECK(cudaFuncGetAttributes(&attributes, not_a_registered_kernel) == cudaErrorInvalidDeviceFunction);
  static_cast<void>(cudaGetLastError());
}

TEST_CASE("every kernel's occupancy is the toolkit's occupancy calculator's from its ptxas figures",
          "[emu]") {
  const std::vector<resources::Kernel> kernels = resources::registered();
  // The project's (all of kernels/cuda, linked whole into this program) and the tests'.
  CHECK(kernels.size() > 40);
  for (const resources::Kernel& k : kernels) {
    CAPTURE(k.name, k.figures.registers, k.figures.static_shared, k.figures.barriers, k.figures.max_threads);
    CHECK(k.figures.registers > 0);
    // The kernel's most threads: the calculator's largest block that fits in a block's registers.
    if (k.figures.max_threads == 0 || k.max_threads_per_block < k.figures.max_threads) {
      CHECK(calculator_blocks(k.figures, k.max_threads_per_block, 0, 0) > 0);
      if (k.max_threads_per_block < 1024)
        CHECK(calculator_blocks(k.figures, k.max_threads_per_block + 32, 0, 0) == 0);
    }
    const std::size_t room = default_dynamic_limit(k.figures);
    std::vector<int> block_sizes{1, 33};
    for (int threads = 32; threads <= k.max_threads_per_block; threads += 32)
      block_sizes.push_back(threads);
    for (const int threads : block_sizes) {
      for (const std::size_t dynamic :
           {std::size_t{0}, std::size_t{1}, std::size_t{4000}, room / 2, room, room + 1}) {
        CAPTURE(threads, dynamic);
        CHECK(resources::blocks_per_sm(k.figures, threads, dynamic, room) ==
              calculator_blocks(k.figures, threads, dynamic, room));
      }
      // Raised past 48 KiB with cudaFuncSetAttribute.
      const std::size_t raised = 100 * 1024;
      for (const std::size_t dynamic : {room + 1, raised - 100, raised, raised + 1}) {
        CAPTURE(threads, dynamic);
        CHECK(resources::blocks_per_sm(k.figures, threads, dynamic, raised) ==
              calculator_blocks(k.figures, threads, dynamic, raised));
      }
    }
  }
}

TEST_CASE("register-limited blocks are sized as the occupancy calculator's hardware check sizes them",
          "[emu]") {
  for (int registers = 1; registers <= 255; ++registers) {
    const emu::KernelResources figures{"", registers, 1, 0, 0, 0};
    const int most = resources::max_threads_per_block(figures);
    CAPTURE(registers, most);
    CHECK(calculator_blocks(figures, most, 0, 48 * 1024) > 0);
    if (most < 1024) CHECK(calculator_blocks(figures, most + 32, 0, 48 * 1024) == 0);
  }
}

TEST_CASE("the persistent kernel's grid is what the occupancy calculator keeps resident on an H200",
          "[emu]") {
  // Its launch asks for 47 KiB of dynamic shared memory at most, in blocks of 256 threads
  // (kernels/cuda/fused/persistent_step.cu); the fewest of its instantiations' (an activation each, with
  // vector and scalar loads).
  int expected = 32;
  int instantiations = 0;
  for (const resources::Kernel& kernel : resources::registered()) {
    if (kernel.name.find("persistent_step_kernel<") == std::string::npos) continue;
    CAPTURE(kernel.name);
    ++instantiations;
    expected = std::min(
        expected, calculator_blocks(kernel.figures, 256, 47 * 1024, default_dynamic_limit(kernel.figures)));
  }
  // Two for each activation with_activation compiles: the table's and identity.
  CHECK(instantiations == 2 * (static_cast<int>(kActivations.size()) + 1));
  CHECK(expected >= 1);
  CHECK(cuda::persistent_step_max_blocks_per_sm() == expected);
}

}  // namespace
}  // namespace mnistdp
