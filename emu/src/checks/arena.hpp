#pragma once
// Device memory's own address range. Every allocation of the emulated devices lies in one range reserved in
// the process's address space, which the host's threads may touch only while an Access lives: while the
// emulated devices run operations (the engine holds one), and while the emulator itself fills or reads
// device memory for a call. At other times the range is mapped without access, so host code that
// dereferences a device pointer faults, as it does on a machine with a GPU, where device memory is not the
// host's; in a build without a sanitizer the fault is reported first, naming the address
// (docs/emulation.md, "Address spaces").
//
// Each device has a part of the range of its own. Allocations are placed next-fit: an address freed is handed
// out again only once the range has been gone through, so that a stale pointer finds no new allocation under
// it for as long as can be. The range is backed by huge pages where the host offers them: opening and closing
// it then costs a few microseconds for hundreds of megabytes.
#include <cstddef>

#include "emu/device_work.hpp"

namespace mnistdp::emu::arena {

// cudaMalloc's guarantee.
constexpr std::size_t kAlignment = 256;

// A new allocation of `bytes` on `device`, in the device's part of the range, aligned to kAlignment, followed
// by at least `slack` bytes that no other allocation holds; null when the part has no room. Its contents are
// whatever the range held.
std::byte* allocate(std::size_t bytes, std::size_t slack, int device);

// Gives back what allocate(bytes, slack) returned.
void release(std::byte* base, std::size_t bytes, std::size_t slack);

// The range: every device allocation lies in [begin(), begin() + bytes()), device d's in the d-th of its
// equal parts.
const std::byte* begin();
std::size_t bytes();

// While one lives, on any thread, the host's threads may touch device memory. Nests. The emulator's name
// for what host code standing in for device work holds (emu/device_work.hpp).
using Access = DeviceWork;

}  // namespace mnistdp::emu::arena
