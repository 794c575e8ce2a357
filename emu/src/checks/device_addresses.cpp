#include "emu/src/checks/device_addresses.hpp"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "emu/builtins.hpp"
#include "emu/launch.hpp"
#include "emu/src/checks/arena.hpp"
#include "emu/src/checks/device_shadow.hpp"
#include "emu/src/device/block.hpp"
#include "emu/src/runtime/engine.hpp"
#include "emu/src/runtime/memory.hpp"

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

struct Span {
  std::uintptr_t begin = 0;
  std::uintptr_t bytes = 0;
};

// The main program's loaded segments (code, constants, data) and the size of its static TLS block, which
// hold the kernels' static data and the emulated built-in variables: every kernel of this build is linked
// into the program, never into a shared library.
struct Program {
  std::vector<Span> segments;
  std::uintptr_t tls_bytes = 0;
};

const Program& program() {
  static const Program p = [] {
    Program found;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* out) {
          auto& program = *static_cast<Program*>(out);
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_LOAD) program.segments.push_back({info->dlpi_addr + ph.p_vaddr, ph.p_memsz});
            if (ph.p_type == PT_TLS) {
              const std::uintptr_t align = std::max<std::uintptr_t>(ph.p_align, 1);
              program.tls_bytes = (ph.p_memsz + align - 1) / align * align;
            }
          }
          return 1;  // the first object is the program itself
        },
        &found);
    return found;
  }();
  return p;
}

// The calling OS thread's static TLS block of the main program. On x86-64 (TLS variant II) it ends at the
// thread pointer, which the thread control block's first word holds. Elsewhere, the whole address space: no
// host address is checked there.
Span static_tls() {
#if defined(__x86_64__)
  std::uintptr_t thread_pointer = 0;
  asm("mov %%fs:0, %0" : "=r"(thread_pointer));
  const Span tls{thread_pointer - program().tls_bytes, program().tls_bytes};
  // The emulated threadIdx is one of the program's thread-local variables: if it is not found in the block,
  // the layout is not the one assumed, and the check would report every kernel.
  const auto probe = reinterpret_cast<std::uintptr_t>(&threadIdx);
  if (probe - tls.begin >= tls.bytes) {
    std::fprintf(stderr, "emulated CUDA: the program's static TLS is not where TLS variant II puts it\n");
    std::abort();
  }
  return tls;
#else
  return {0, ~std::uintptr_t{0}};
#endif
}

// The calling OS thread's static TLS, allowed in the shadow while the thread lives, from its first block.
struct AllowedTls {
  Span tls = static_tls();
  AllowedTls() { device_shadow::allow(reinterpret_cast<const void*>(tls.begin), tls.bytes); }
  ~AllowedTls() { device_shadow::disallow(reinterpret_cast<const void*>(tls.begin), tls.bytes); }
  AllowedTls(const AllowedTls&) = delete;
  AllowedTls& operator=(const AllowedTls&) = delete;
};

bool has_peer_access(int device, int peer) {
  Engine& e = Engine::get();
  std::lock_guard lock(e.mutex);
  const auto& enabled = e.devices.at(static_cast<std::size_t>(device)).peer_enabled;
  return static_cast<std::size_t>(peer) < enabled.size() && enabled[static_cast<std::size_t>(peer)];
}

}  // namespace

void enter(int device, const char* kernel, IllegalAccess& record, const void* parameters,
           std::size_t parameter_bytes) {
  Running& r = running;
  r = Running{};
  r.range_begin = reinterpret_cast<std::uintptr_t>(arena::begin());
  r.range_bytes = arena::bytes();
  r.device = device;
  r.kernel = kernel;
  r.record = &record;
  r.parameters_begin = reinterpret_cast<std::uintptr_t>(parameters);
  r.parameters_bytes = parameter_bytes;
  static thread_local const AllowedTls allowed;
  r.tls_begin = allowed.tls.begin;
  r.tls_bytes = allowed.tls.bytes;
}

void allow_program() {
  for (const Span& segment : program().segments)
    device_shadow::allow(reinterpret_cast<const void*>(segment.begin), segment.bytes);
}

void leave() {
  running = Running{};
}

}  // namespace mnistdp::emu::device_addresses

namespace mnistdp::emu {

bool kernel_code(bool running_kernel) {
  return std::exchange(device_addresses::running.in_kernel, running_kernel);
}

}  // namespace mnistdp::emu

namespace mnistdp::emu::device_addresses {

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

void library_reaches(const char* what, int device, const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  bool whole = false;
  const std::optional<Allocation> a = find_allocation(p, bytes, &whole);
  if (a && whole && (a->device < 0 || a->device == device || has_peer_access(device, a->device))) return;
  std::ostringstream message;
  message << "emulated CUDA: illegal address: " << what << " on device " << device << " reaches " << bytes
          << " bytes at " << hex(reinterpret_cast<std::uintptr_t>(p)) << ", ";
  if (!a)
    message << "in no live allocation (pageable host memory, freed memory, or memory never allocated)";
  else if (!whole)
    message << "running past the end of an allocation of " << a->bytes << " bytes";
  else
    message << "in an allocation of device " << a->device << ", to which device " << device
            << " has no peer access";
  throw Fault(cudaErrorIllegalAddress, message.str());
}

void on_poisoned(std::uintptr_t address, unsigned bytes, bool write) {
  Running& r = running;
  if (address - r.range_begin < r.range_bytes) return check_access(address, bytes, write);
  if (r.record == nullptr || !r.in_kernel) return;  // host code, or the emulator's
  // Spans the shadow allows, whose first or last granule it may hold poisoned in part.
  if (in_own_host_memory(r, address, bytes)) return;
  const EmulatorCode emulator;
  check_host_access(address, bytes, write);
}

void check_host_access(std::uintptr_t address, unsigned bytes, bool write) {
  Running& r = running;
  if (r.record == nullptr) return;
  const auto keep = [&r](std::uintptr_t begin, std::uintptr_t span) {
    const unsigned slot = r.next_host++ % Running::kSpans;
    r.host_begin[slot] = begin;
    r.host_bytes[slot] = span;
  };
  std::uintptr_t begin = 0;
  std::size_t span = 0;
  if (block_shared_memory(address, &begin, &span) && within(address, bytes, begin, span))
    return keep(begin, span);
  for (const Span& segment : program().segments)
    if (within(address, bytes, segment.begin, segment.bytes)) return keep(segment.begin, segment.bytes);
  bool whole = false;
  const std::optional<Allocation> a = find_allocation(reinterpret_cast<const void*>(address), bytes, &whole);
  if (a && whole && a->device < 0) return keep(reinterpret_cast<std::uintptr_t>(a->base), a->bytes);
  if (r.record->seen) return;
  r.record->seen = true;
  std::ostringstream message;
  message << "emulated CUDA: illegal address: kernel " << r.kernel << ", block " << dims(blockIdx)
          << " thread " << dims(threadIdx) << ", " << (write ? "writes " : "reads ") << bytes << " bytes at "
          << hex(address) << " on device " << r.device
          << ", in host memory that is not pinned (a device reaches host memory only through cudaMallocHost)";
  r.record->message = message.str();
}

}  // namespace mnistdp::emu::device_addresses
