#include "emu/src/device_shadow.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu/src/device_addresses.hpp"
#include "emu/src/sanitizer.hpp"

#if defined(MNISTDP_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace mnistdp::emu::device_shadow {

#if defined(MNISTDP_EMU_ASAN)

void poison(const void* begin, std::size_t bytes) {
  ASAN_POISON_MEMORY_REGION(begin, bytes);
}

void unpoison(const void* begin, std::size_t bytes) {
  ASAN_UNPOISON_MEMORY_REGION(begin, bytes);
}

#elif defined(MNISTDP_EMU_DEVICE_SHADOW)

namespace {

// AddressSanitizer's x86-64 mapping: a shadow byte for each 8 bytes, at (address >> 3) + kOffset; 0: all 8
// addressable, k in 1 to 7: the first k, negative: none. Of its regions only the shadows of low and high
// memory are mapped (the gap between them, the shadow of the shadow, is never read: no address there is
// used). Reserved, not committed: only the shadow of device memory is ever written.
constexpr std::uintptr_t kOffset = 0x7fff8000;
constexpr std::uintptr_t kLowShadowBegin = 0x00007fff8000, kLowShadowEnd = 0x00008fff7000;
constexpr std::uintptr_t kHighShadowBegin = 0x02008fff7000, kHighShadowEnd = 0x10007fff8000;
constexpr signed char kPoisoned = -9;  // 0xf7, AddressSanitizer's "user poisoned" value

void map_shadow(std::uintptr_t begin, std::uintptr_t end) {
  void* p = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != reinterpret_cast<void*>(begin)) {
    std::fprintf(stderr, "emulated CUDA: cannot map the shadow of device memory at %#llx: %s\n",
                 static_cast<unsigned long long>(begin), p == MAP_FAILED ? std::strerror(errno) : "moved");
    std::abort();
  }
}

signed char* shadow_of(std::uintptr_t address) {
  return reinterpret_cast<signed char*>((address >> 3) + kOffset);
}

}  // namespace

// Device allocations are 256-byte aligned and guard zones follow them, so `begin` is 8-byte aligned
// whenever a range starts a granule; an unaligned end leaves its granule's first bytes addressable.
void poison(const void* begin, std::size_t bytes) {
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t first = (b + 7) / 8 * 8;  // a granule partly before `begin` keeps its bytes
  const std::uintptr_t end = (b + bytes) / 8 * 8;
  if (first < end) std::memset(shadow_of(first), kPoisoned, (end - first) / 8);
}

void unpoison(const void* begin, std::size_t bytes) {
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t end = b + bytes;
  const std::uintptr_t whole_end = end / 8 * 8;
  if (b / 8 * 8 < whole_end) std::memset(shadow_of(b / 8 * 8), 0, (whole_end - b / 8 * 8) / 8);
  if (end % 8 != 0) *shadow_of(whole_end) = static_cast<signed char>(end % 8);
}

#else

void poison(const void*, std::size_t) {}
void unpoison(const void*, std::size_t) {}

#endif

}  // namespace mnistdp::emu::device_shadow

#if defined(MNISTDP_EMU_DEVICE_SHADOW) && !defined(MNISTDP_EMU_ASAN)
// The entry points of AddressSanitizer's instrumentation (-fsanitize=address -fsanitize-recover=address,
// without its stack, globals and use-after-scope checks), which the kernels' code calls.
extern "C" {

// Called by each instrumented file's constructor, before any of its code runs.
void __asan_init() {
  static const bool mapped = [] {
    using namespace mnistdp::emu::device_shadow;
    map_shadow(kLowShadowBegin, kLowShadowEnd);
    map_shadow(kHighShadowBegin, kHighShadowEnd);
    return true;
  }();
  static_cast<void>(mapped);
}

void __asan_version_mismatch_check_v8() {}
void __asan_handle_no_return() {}
// GCC's check of the order of dynamic initialisation, which this runtime does not make.
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}

void* __asan_memcpy(void* to, const void* from, std::size_t bytes) {
  return std::memcpy(to, from, bytes);
}
void* __asan_memmove(void* to, const void* from, std::size_t bytes) {
  return std::memmove(to, from, bytes);
}
void* __asan_memset(void* to, int value, std::size_t bytes) {
  return std::memset(to, value, bytes);
}

// A poisoned shadow byte: the access is checked against the allocations, and recorded if illegal.
#define MNISTDP_EMU_SHADOW_REPORTS(bytes)                                \
  void __asan_report_load##bytes##_noabort(std::uintptr_t address) {     \
    mnistdp::emu::device_addresses::check_access(address, bytes, false); \
  }                                                                      \
  void __asan_report_store##bytes##_noabort(std::uintptr_t address) {    \
    mnistdp::emu::device_addresses::check_access(address, bytes, true);  \
  }
MNISTDP_EMU_SHADOW_REPORTS(1)
MNISTDP_EMU_SHADOW_REPORTS(2)
MNISTDP_EMU_SHADOW_REPORTS(4)
MNISTDP_EMU_SHADOW_REPORTS(8)
MNISTDP_EMU_SHADOW_REPORTS(16)
#undef MNISTDP_EMU_SHADOW_REPORTS

void __asan_report_load_n_noabort(std::uintptr_t address, std::size_t bytes) {
  mnistdp::emu::device_addresses::check_access(address, static_cast<unsigned>(bytes), false);
}
void __asan_report_store_n_noabort(std::uintptr_t address, std::size_t bytes) {
  mnistdp::emu::device_addresses::check_access(address, static_cast<unsigned>(bytes), true);
}

}  // extern "C"
#endif
