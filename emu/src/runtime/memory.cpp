#include "emu/src/runtime/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "emu/src/checks/arena.hpp"
#include "emu/src/checks/device_shadow.hpp"
#include "emu/src/checks/operation_races.hpp"
#include "emu/src/checks/sanitizer.hpp"
#include "emu/src/runtime/engine.hpp"

namespace mnistdp::emu {
namespace {

// The guard zone after each device allocation (kGuardBytes): poisoned for AddressSanitizer in its build and
// for the shadow check of preset emu (device_shadow.hpp), which see every access to it; filled with a pattern
// checked after every kernel only where neither runs (preset emu-tsan).
#if defined(MNISTDP_EMU_DEVICE_SHADOW)
constexpr bool kGuardPattern = false;
#else
constexpr bool kGuardPattern = !sanitizer::kAddress;
#endif
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kPoisonByte = 0xFF;  // every float and double of 0xFF bytes is a NaN

struct Registry {
  std::mutex mutex;
  std::map<const std::byte*, Allocation> live;  // by base address
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

}  // namespace

std::optional<Allocation> find_allocation(const void* p, std::size_t bytes, bool* whole) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto* at = static_cast<const std::byte*>(p);
  auto it = r.live.upper_bound(at);
  if (it == r.live.begin()) return std::nullopt;
  --it;
  const Allocation& a = it->second;
  if (at >= a.base + a.bytes + (a.bytes == 0 ? 1 : 0)) return std::nullopt;
  if (whole) *whole = at + bytes <= a.base + a.bytes;
  return a;
}

std::optional<Allocation> allocation_below(const void* p) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.live.upper_bound(static_cast<const std::byte*>(p));
  if (it == r.live.begin()) return std::nullopt;
  return std::prev(it)->second;
}

std::vector<Allocation> live_allocations() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<Allocation> out;
  out.reserve(r.live.size());
  for (const auto& [base, a] : r.live)
    out.push_back(a);
  return out;
}

void check_guard_zones(int device, const std::string& kernel) {
  if (!kGuardPattern) return;
  const arena::Access access;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [base, a] : r.live) {
    if (a.device != device) continue;
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
      if (a.base[a.bytes + i] != std::byte{kGuardByte}) {
        throw Fault(cudaErrorIllegalAddress,
                    "emulated CUDA: kernel " + kernel + " wrote past the end of a device allocation of " +
                        std::to_string(a.bytes) + " bytes at " + hex(a.base) + ", at its byte " +
                        std::to_string(a.bytes + i) + " (an out-of-bounds store)");
      }
    }
  }
}

}  // namespace mnistdp::emu

using mnistdp::emu::Allocation;
using mnistdp::emu::Engine;
using mnistdp::emu::record;
using mnistdp::emu::registry;

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  if (!ptr) return record(cudaErrorInvalidValue);
  Engine& e = Engine::get();
  if (e.devices.empty()) return record(cudaErrorNoDevice);
  if (e.unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  const int device = e.current_device();
  if (const cudaError_t f = e.device_fault(device); f != cudaSuccess) return record(f);
  {
    // More than the device's free memory fails, as on a GPU.
    std::lock_guard lock(e.mutex);
    if (bytes > mnistdp::emu::kDeviceMemory - e.devices[static_cast<std::size_t>(device)].allocated)
      return record(cudaErrorMemoryAllocation);
  }
  std::byte* base = mnistdp::emu::arena::allocate(bytes, mnistdp::emu::kGuardBytes, device);
  if (!base) return record(cudaErrorMemoryAllocation);
  {
    const mnistdp::emu::arena::Access access;
    std::memset(base, mnistdp::emu::kPoisonByte, bytes);
    if (mnistdp::emu::kGuardPattern)
      std::memset(base + bytes, mnistdp::emu::kGuardByte, mnistdp::emu::kGuardBytes);
  }
  void* p = base;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    r.live[base] = Allocation{base, bytes, device};
  }
  {
    std::lock_guard lock(e.mutex);
    e.devices[static_cast<std::size_t>(device)].allocated += bytes;
  }
  *ptr = p;
  return cudaSuccess;
}

namespace {

cudaError_t release(void* ptr, bool pinned) {
  if (!ptr) return cudaSuccess;
  Engine& e = Engine::get();
  if (e.unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  Allocation a;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.live.find(static_cast<std::byte*>(ptr));
    if (it == r.live.end() || (it->second.device < 0) != pinned) return record(cudaErrorInvalidValue);
    a = it->second;
  }
  // cudaFree waits for the device's work, as the runtime does: a kernel still to run may use the memory.
  if (!pinned) {
    std::vector<CUstream_st*> streams;
    {
      std::lock_guard lock(e.mutex);
      streams = e.devices[static_cast<std::size_t>(a.device)].streams;
    }
    for (CUstream_st* st : streams)
      e.wait_stream(st);
  }
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    r.live.erase(static_cast<std::byte*>(ptr));
  }
  mnistdp::emu::operation_races::forget(ptr);
  if (pinned) {
    mnistdp::emu::device_shadow::disallow(ptr, a.bytes);
    std::free(ptr);
  } else {
    {
      std::lock_guard lock(e.mutex);
      e.devices[static_cast<std::size_t>(a.device)].allocated -= a.bytes;
    }
    mnistdp::emu::arena::release(a.base, a.bytes, mnistdp::emu::kGuardBytes);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaFree(void* ptr) {
  return release(ptr, false);
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  if (!ptr) return record(cudaErrorInvalidValue);
  void* p = nullptr;
  if (posix_memalign(&p, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), std::max<std::size_t>(bytes, 1)) !=
      0)
    return record(cudaErrorMemoryAllocation);
  std::memset(p, mnistdp::emu::kPoisonByte, bytes);
  mnistdp::emu::device_shadow::allow(p, bytes);  // the devices' too (device_shadow.hpp)
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    r.live[static_cast<std::byte*>(p)] = Allocation{static_cast<std::byte*>(p), bytes, -1};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  return release(ptr, true);
}
