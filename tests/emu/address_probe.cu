// Device memory's address space in the emulated build (docs/emulation.md, "Address spaces"):
// `mnistdp_emu_address_probe CASE` runs one case. A case that touches device memory where a GPU's machine
// would fault must end the process with the fault's report, which ctest looks for; its twin, which does the
// same thing the right way, must run to the end.
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/memory.hpp"
#include "tests/emu/probe_main.hpp"

#if defined(MNISTDP_CUDA_EMULATED)  // not in nvcc's report of the kernels' resources
#include "emu/device_work.hpp"
#endif

namespace mnistdp::emu_probe {
namespace {

constexpr int kCount = 64;

__global__ void fill_kernel(float* __restrict__ out,  // [n]
                            float value, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

// The host's read of a value, which the compiler may not drop.
float read_on_host(const float* p) {
  const volatile float* v = p;
  return *v;
}

void filled(DeviceBuffer<float>& buffer) {
  cuda::detail::launch<fill_kernel>(1, kCount, 0, nullptr, buffer.data(), 2.0f, kCount);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void host_reads_device_memory() {
  DeviceBuffer<float> buffer(kCount);
  std::printf("read %g\n", static_cast<double>(read_on_host(buffer.data())));
}

void host_reads_after_kernels() {
  DeviceBuffer<float> buffer(kCount);
  filled(buffer);
  std::printf("read %g\n", static_cast<double>(read_on_host(buffer.data())));
}

void host_function_reads_device_memory() {
  DeviceBuffer<float> buffer(kCount);
  filled(buffer);
  CUDA_CHECK(cudaLaunchHostFunc(
      nullptr,
      [](void* p) { std::printf("read %g\n", static_cast<double>(read_on_host(static_cast<float*>(p)))); },
      buffer.data()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The twins: a copy to the host, and the emulated build's own device work.
void host_reads_a_copy() {
  DeviceBuffer<float> buffer(kCount);
  filled(buffer);
  std::vector<float> copy(kCount);
  CUDA_CHECK(cudaMemcpy(copy.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
  if (copy[kCount - 1] != 2.0f) throw std::runtime_error("the copy did not hold the kernel's values");
}

#if defined(MNISTDP_CUDA_EMULATED)
void device_work_reads_device_memory() {
  DeviceBuffer<float> buffer(kCount);
  filled(buffer);
  const emu::DeviceWork device_work;
  if (read_on_host(buffer.data() + kCount - 1) != 2.0f)
    throw std::runtime_error("device work did not read the kernel's values");
}
#endif

constexpr Case kCases[] = {
    {"host-reads-device-memory", host_reads_device_memory},
    {"host-reads-after-kernels", host_reads_after_kernels},
    {"host-function-reads-device-memory", host_function_reads_device_memory},
    {"host-reads-a-copy", host_reads_a_copy},
#if defined(MNISTDP_CUDA_EMULATED)
    {"device-work-reads-device-memory", device_work_reads_device_memory},
#endif
};

}  // namespace
}  // namespace mnistdp::emu_probe

int main(int argc, char** argv) {
  return mnistdp::emu_probe::run_case("mnistdp_emu_address_probe", mnistdp::emu_probe::kCases, argc, argv);
}
