// Device memory's address space in the emulated build (docs/emulation.md, "Address spaces"):
// `mnistdp_emu_address_probe CASE` runs one case. A case that touches device memory where a GPU's machine
// would fault must end the process with the fault's report, which ctest looks for; its twin, which does the
// same thing the right way, must run to the end.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/memory.hpp"
#include "tests/emu/probe_main.hpp"

#if defined(MNISTDP_CUDA_EMULATED)  // not in nvcc's report of the kernels' resources
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

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

// Thread i copies in[i] for i <= n: one past the end of an allocation of n floats, with a bounds check off
// by one.
__global__ void copy_kernel(const float* __restrict__ in,  // [n], or [n + 1] for the twin
                            float* __restrict__ out,       // [n + 1]
                            int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i <= n) out[i] = in[i];
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

// A kernel's accesses, checked against the allocations of its device and of the devices it may reach.
void copy(const float* in, float* out) {
  cuda::detail::launch<copy_kernel>(1, kCount + 1, 0, nullptr, in, out, kCount);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void kernel_reads_past_end() {
  DeviceBuffer<float> in(kCount), out(kCount + 1);
  filled(in);
  copy(in.data(), out.data());
}

void kernel_writes_past_end() {
  DeviceBuffer<float> in(kCount + 1), out(kCount);
  CUDA_CHECK(cudaMemset(in.data(), 0, in.bytes()));
  copy(in.data(), out.data());
}

void kernel_reads_freed_memory() {
  DeviceBuffer<float> out(kCount + 1);
  float* freed = nullptr;
  {
    DeviceBuffer<float> in(kCount + 1);
    CUDA_CHECK(cudaMemset(in.data(), 0, in.bytes()));
    freed = in.data();
  }
  copy(freed, out.data());
}

// Device 1's allocation, read by a kernel on device 0, with or without peer access.
void kernel_reads_another_device(bool peer_access) {
  void* allocated = nullptr;
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaMalloc(&allocated, (kCount + 1) * sizeof(float)));
  auto* on_device_1 = static_cast<float*>(allocated);
  CUDA_CHECK(cudaMemset(on_device_1, 0, (kCount + 1) * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaSetDevice(0));
  if (peer_access) CUDA_CHECK(cudaDeviceEnablePeerAccess(1, 0));
  DeviceBuffer<float> out(kCount + 1);
  copy(on_device_1, out.data());
  CUDA_CHECK(cudaFree(on_device_1));
}

void kernel_reads_another_device_without_peer_access() {
  kernel_reads_another_device(false);
}

void kernel_reads_another_device_with_peer_access() {
  kernel_reads_another_device(true);
}

void kernel_reads_to_the_end() {
  DeviceBuffer<float> in(kCount + 1), out(kCount + 1);
  CUDA_CHECK(cudaMemset(in.data(), 0, in.bytes()));
  copy(in.data(), out.data());
}

// Pinned host memory is mapped into the devices' address space, as cudaMallocHost's is under unified
// addressing.
void kernel_reads_pinned_memory() {
  PinnedBuffer<float> in(kCount + 1);
  for (int i = 0; i <= kCount; ++i)
    in.data()[i] = 1.0f;
  DeviceBuffer<float> out(kCount + 1);
  copy(in.data(), out.data());
}

// Pageable host memory (a std::vector's), which a device without pageable memory access cannot reach: the
// bug of passing the host's copy where the device's was meant. Its twin is the pinned memory above.
void kernel_reads_pageable_memory() {
  const std::vector<float> in(kCount + 1, 1.0f);
  DeviceBuffer<float> out(kCount + 1);
  copy(in.data(), out.data());
}

// The host thread's stack, which no device reaches: the bug of passing the address of a local.
void kernel_reads_host_stack() {
  float in[kCount + 1] = {};
  DeviceBuffer<float> out(kCount + 1);
  copy(in, out.data());
}

// Pinned memory given back: host memory like any other from then on.
void kernel_reads_freed_pinned_memory() {
  const float* freed = nullptr;
  {
    PinnedBuffer<float> in(kCount + 1);
    for (int i = 0; i <= kCount; ++i)
      in.data()[i] = 1.0f;
    freed = in.data();
  }
  DeviceBuffer<float> out(kCount + 1);
  copy(freed, out.data());
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
// Runs the probe again on case `inner`, in a process where userfaultfd(2) fails with EPERM, as a container's
// seccomp filter may make it: the emulator cannot make the shadow of host memory there (device_shadow.hpp).
[[noreturn]] void without_userfaultfd(const char* inner) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
    throw std::runtime_error("cannot install the seccomp filter");
  char self[] = "/proc/self/exe";
  char name[] = "mnistdp_emu_address_probe";
  std::vector<char> argument(inner, inner + std::char_traits<char>::length(inner) + 1);
  char* arguments[] = {name, argument.data(), nullptr};
  execv(self, arguments);
  throw std::runtime_error("cannot run the probe again");
}

void kernel_reads_pageable_memory_without_userfaultfd() {
  without_userfaultfd("kernel-reads-pageable-memory");
}

void kernel_reads_past_end_without_userfaultfd() {
  without_userfaultfd("kernel-reads-past-end");
}

void device_work_reads_device_memory() {
  DeviceBuffer<float> buffer(kCount);
  filled(buffer);
  const emu::DeviceWork device_work;
  if (read_on_host(buffer.data() + kCount - 1) != 2.0f)
    throw std::runtime_error("device work did not read the kernel's values");
}
#endif

constexpr Case kCases[] = {
    {"kernel-reads-past-end", kernel_reads_past_end},
    {"kernel-writes-past-end", kernel_writes_past_end},
    {"kernel-reads-freed-memory", kernel_reads_freed_memory},
    {"kernel-reads-another-device-without-peer-access", kernel_reads_another_device_without_peer_access},
    {"kernel-reads-another-device-with-peer-access", kernel_reads_another_device_with_peer_access},
    {"kernel-reads-to-the-end", kernel_reads_to_the_end},
    {"kernel-reads-pinned-memory", kernel_reads_pinned_memory},
    {"kernel-reads-pageable-memory", kernel_reads_pageable_memory},
    {"kernel-reads-host-stack", kernel_reads_host_stack},
    {"kernel-reads-freed-pinned-memory", kernel_reads_freed_pinned_memory},
    {"host-reads-device-memory", host_reads_device_memory},
    {"host-reads-after-kernels", host_reads_after_kernels},
    {"host-function-reads-device-memory", host_function_reads_device_memory},
    {"host-reads-a-copy", host_reads_a_copy},
#if defined(MNISTDP_CUDA_EMULATED)
    {"device-work-reads-device-memory", device_work_reads_device_memory},
    {"kernel-reads-pageable-memory-without-userfaultfd", kernel_reads_pageable_memory_without_userfaultfd},
    {"kernel-reads-past-end-without-userfaultfd", kernel_reads_past_end_without_userfaultfd},
#endif
};

}  // namespace
}  // namespace mnistdp::emu_probe

int main(int argc, char** argv) {
  return mnistdp::emu_probe::run_case("mnistdp_emu_address_probe", mnistdp::emu_probe::kCases, argc, argv);
}
