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
// How the check hears of the kernels' accesses (CMakeLists.txt, mnistdp_cuda_sources): in preset emu, from
// AddressSanitizer's inline instrumentation, which calls check_access only for an access whose shadow byte
// device_shadow.hpp has poisoned; in preset emu-asan, from SanitizerCoverage's load and store callbacks
// (block_races.cpp), which call on_access for every access; in preset emu-tsan, not at all.
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
};
inline constinit thread_local Running running{};

// Called by block.cpp around a block's run on its OS thread.
void enter(int device, const char* kernel, IllegalAccess& record);
void leave();

// An access that falls outside every span known good: finds its allocation, or records it as illegal.
void check_access(std::uintptr_t address, unsigned bytes, bool write);

inline void on_access(const void* p, unsigned bytes, bool write) {
  Running& r = running;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (at - r.range_begin >= r.range_bytes) return;  // not device memory, or no block running
  for (int i = 0; i < Running::kSpans; ++i)
    if (at - r.span_begin[i] < r.span_bytes[i] && bytes <= r.span_bytes[i] - (at - r.span_begin[i])) return;
  check_access(at, bytes, write);
}

}  // namespace mnistdp::emu::device_addresses
