#pragma once
// The check that a kernel touches device memory only inside the live allocations of its own device and of
// the devices it has peer access to (docs/emulation.md, "Address spaces"). An access elsewhere in device
// memory's range (arena.hpp) is an illegal address on a GPU: past an allocation's end (a tile's edge), in
// freed memory, in another device's allocation without peer access. The first such access of a block is
// recorded with the kernel, the block, the thread and the address, and the block then fails with
// cudaErrorIllegalAddress, sticky, as on a GPU. The access itself goes ahead (it reads or writes memory of
// the emulator's range, which no live allocation of the kernel's owns): the hooks run inside the kernel's
// code, which they must not unwind.
//
// How the check hears of the kernels' accesses (emu/cmake/cuda_sources.cmake): in preset emu, from
// AddressSanitizer's inline instrumentation, which calls on_poisoned only for an access whose shadow byte
// device_shadow.hpp has poisoned (another device's memory reads as poisoned there); in preset emu-asan, from
// SanitizerCoverage's load and store callbacks (block_races.cpp), which call on_access for every access; in
// preset emu-tsan, not at all.
//
// Host memory. A kernel here runs in host memory of its own: its threads' stacks, its block's shared memory,
// its launch's parameters, the program's static data and the OS thread's static TLS (where threadIdx and its
// siblings live). An H200 reaches no other host memory but pinned allocations (cudaMallocHost): its devices
// report no pageable memory access, and a read of a pointer from malloc or new is an illegal address. An
// access to host memory outside those is recorded as one too: in preset emu, where the shadow of every other
// host byte is poisoned (device_shadow.hpp); in emu-asan, where every access is heard.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mnistdp::emu::device_addresses {

// The first illegal access of a block, or none.
struct IllegalAccess {
  bool seen = false;
  std::string message;
};

// What the hooks need of the running block, on its OS thread.
struct Running {
  static constexpr int kSpans = 4;
  std::uintptr_t range_begin = 0, range_bytes = 0;  // device memory's range; 0 bytes: no block running
  // Allocations this block may touch, as [begin, begin + bytes): most accesses fall in one of them.
  std::uintptr_t span_begin[kSpans] = {}, span_bytes[kSpans] = {};
  unsigned next_span = 0;
  int device = -1;
  const char* kernel = nullptr;
  IllegalAccess* record = nullptr;
  // The host memory the kernel's code may touch (above), as [begin, begin + bytes): the running emulated
  // thread's stack, the OS thread's static TLS, the launch's parameters, and spans found since (the block's
  // shared memory, the program's static data, pinned allocations).
  std::uintptr_t stack_begin = 0, stack_bytes = 0;
  std::uintptr_t tls_begin = 0, tls_bytes = 0;
  std::uintptr_t parameters_begin = 0, parameters_bytes = 0;
  std::uintptr_t host_begin[kSpans] = {}, host_bytes[kSpans] = {};
  unsigned next_host = 0;
  // Whether the kernel's own code is running (launch.hpp, kernel_code), rather than the emulator's: the
  // library code they share is compiled once for both, instrumented where a kernel's file instantiated it,
  // so an emulator's access to its own heap may reach the hooks too.
  bool in_kernel = false;
};
inline constinit thread_local Running running{};

// The emulator's code, called from a kernel's (a builtin): its host accesses are not the kernel's.
class EmulatorCode {
 public:
  EmulatorCode() : was_(running.in_kernel) { running.in_kernel = false; }
  ~EmulatorCode() { running.in_kernel = was_; }
  EmulatorCode(const EmulatorCode&) = delete;
  EmulatorCode& operator=(const EmulatorCode&) = delete;

 private:
  bool was_;
};

// Called by block.cpp around a block's run on its OS thread; `parameters` is the launch's parameter space.
void enter(int device, const char* kernel, IllegalAccess& record, const void* parameters,
           std::size_t parameter_bytes);
void leave();

// Called by block.cpp as an emulated thread starts or resumes: its stack, [bottom, bottom + bytes).
inline void running_stack(const void* bottom, std::size_t bytes) {
  running.stack_begin = reinterpret_cast<std::uintptr_t>(bottom);
  running.stack_bytes = bytes;
}

// An access that falls outside every span known good: finds its allocation, or records it as illegal.
void check_access(std::uintptr_t address, unsigned bytes, bool write);

// An access whose shadow byte is poisoned (preset emu, device_shadow.hpp): in device memory, checked as
// above; in host memory, by the kernel's own code, an illegal address unless it is the kernel's (below).
void on_poisoned(std::uintptr_t address, unsigned bytes, bool write);

// Allows the program's static data to every kernel, in the shadow of preset emu.
void allow_program();

// A library's device code on `device` (`what`: "cublasSgemm", "ncclAllReduce") reaching [p, p + bytes), as it
// runs: throws Fault (cudaErrorIllegalAddress, sticky as a kernel's) unless the range lies whole in one
// allocation the device reaches: its own, a peer's whose access it enabled, or pinned host memory. Pageable
// host memory, another device's without peer access and freed memory are what a GPU's kernel faults on.
void library_reaches(const char* what, int device, const void* p, std::size_t bytes);

// The same for an access to host memory outside the spans known good (emu-asan).
void check_host_access(std::uintptr_t address, unsigned bytes, bool write);

inline bool within(std::uintptr_t at, unsigned bytes, std::uintptr_t begin, std::uintptr_t span) {
  return at - begin < span && bytes <= span - (at - begin);
}

// Whether the access falls in the running thread's stack, its OS thread's static TLS or its launch's
// parameters: the host memory a kernel touches most.
inline bool in_own_host_memory(const Running& r, std::uintptr_t at, unsigned bytes) {
  return within(at, bytes, r.stack_begin, r.stack_bytes) || within(at, bytes, r.tls_begin, r.tls_bytes) ||
         within(at, bytes, r.parameters_begin, r.parameters_bytes);
}

inline void on_access(const void* p, unsigned bytes, bool write) {
  Running& r = running;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (at - r.range_begin >= r.range_bytes) {  // not device memory, or no block running
    if (r.record == nullptr || !r.in_kernel || in_own_host_memory(r, at, bytes)) return;
    for (int i = 0; i < Running::kSpans; ++i)
      if (within(at, bytes, r.host_begin[i], r.host_bytes[i])) return;
    const EmulatorCode emulator;  // the check's own accesses (its message) are not the kernel's
    check_host_access(at, bytes, write);
    return;
  }
  for (int i = 0; i < Running::kSpans; ++i)
    if (within(at, bytes, r.span_begin[i], r.span_bytes[i])) return;
  const EmulatorCode emulator;
  check_access(at, bytes, write);
}

}  // namespace mnistdp::emu::device_addresses
