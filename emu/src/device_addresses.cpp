#include "emu/src/device_addresses.hpp"

#include <cstdio>
#include <mutex>
#include <optional>
#include <sstream>

#include "emu/builtins.hpp"
#include "emu/src/arena.hpp"
#include "emu/src/engine.hpp"
#include "emu/src/memory.hpp"

namespace mnistdp::emu::device_addresses {
namespace {

std::string hex(std::uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

std::string dims(uint3 v) {
  std::ostringstream text;
  text << "(" << v.x << "," << v.y << "," << v.z << ")";
  return text.str();
}

bool has_peer_access(int device, int peer) {
  Engine& e = Engine::get();
  std::lock_guard lock(e.mutex);
  const auto& enabled = e.devices.at(static_cast<std::size_t>(device)).peer_enabled;
  return static_cast<std::size_t>(peer) < enabled.size() && enabled[static_cast<std::size_t>(peer)];
}

}  // namespace

void enter(int device, const char* kernel, IllegalAccess& record) {
  Running& r = running;
  r = Running{};
  r.range_begin = reinterpret_cast<std::uintptr_t>(arena::begin());
  r.range_bytes = arena::bytes();
  r.device = device;
  r.kernel = kernel;
  r.record = &record;
}

void leave() {
  running = Running{};
}

void check_access(std::uintptr_t address, unsigned bytes, bool write) {
  Running& r = running;
  if (r.record == nullptr) return;  // host code of a kernel's file, outside every block
  bool whole = false;
  const std::optional<Allocation> a = find_allocation(reinterpret_cast<const void*>(address), bytes, &whole);
  const bool own = a && (a->device == r.device || has_peer_access(r.device, a->device));
  if (a && whole && own) {
    const unsigned slot = r.next_span++ % Running::kSpans;
    r.span_begin[slot] = reinterpret_cast<std::uintptr_t>(a->base);
    r.span_bytes[slot] = a->bytes;
    return;
  }
  if (r.record->seen) return;
  r.record->seen = true;
  std::ostringstream message;
  message << "emulated CUDA: illegal address: kernel " << r.kernel << ", block " << dims(blockIdx)
          << " thread " << dims(threadIdx) << ", " << (write ? "writes " : "reads ") << bytes << " bytes at "
          << hex(address) << " on device " << r.device << ", ";
  const std::optional<Allocation> below =
      a ? std::nullopt : allocation_below(reinterpret_cast<const void*>(address));
  const auto end_below = below ? reinterpret_cast<std::uintptr_t>(below->base) + below->bytes : 0;
  if (!a && below && below->device >= 0 && address - end_below < kGuardBytes) {
    message << address - end_below << " bytes past the end of a device allocation of " << below->bytes
            << " bytes at " << hex(reinterpret_cast<std::uintptr_t>(below->base));
  } else if (!a) {
    message << "outside every live allocation (in freed memory, or memory never allocated)";
  } else if (!own) {
    message << "in an allocation of device " << a->device << ", to which device " << r.device
            << " has no peer access";
  } else {
    message << "running past the end of a device allocation of " << a->bytes << " bytes at "
            << hex(reinterpret_cast<std::uintptr_t>(a->base));
  }
  r.record->message = message.str();
}

}  // namespace mnistdp::emu::device_addresses
