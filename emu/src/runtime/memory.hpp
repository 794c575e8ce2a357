#pragma once
// Device and pinned host memory of the emulated devices. A device allocation lies in device memory's own
// address range (arena.hpp), closed to host code outside the devices' operations; it is filled with a NaN
// pattern (so that a read of memory nobody wrote shows in the results) and followed by a guard zone:
// poisoned for AddressSanitizer in its build (so that it reports a kernel's access past the end), and
// elsewhere filled with a pattern that is checked after every kernel (so that a store past the end is
// reported with the kernel's name). Pinned host memory is the host's heap.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace mnistdp::emu {

// What each emulated device reports as its memory, and the most it allocates.
constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;

struct Allocation {
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  int device = -1;  // -1: pinned host memory
};

// The allocation holding [p, p + bytes), if p lies in one; `whole` is false when the range runs past its end.
std::optional<Allocation> find_allocation(const void* p, std::size_t bytes, bool* whole);

// The live allocation with the highest base at or below p, if any.
std::optional<Allocation> allocation_below(const void* p);

// The bytes after each device allocation that no other allocation holds.
constexpr std::size_t kGuardBytes = 256;

// Every live allocation, device and pinned, by base address.
std::vector<Allocation> live_allocations();

// Throws Fault (cudaErrorIllegalAddress) naming `kernel` when a guard zone of the device's allocations was
// written.
void check_guard_zones(int device, const std::string& kernel);

}  // namespace mnistdp::emu
