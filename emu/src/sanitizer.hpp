#pragma once
// The sanitizer builds (presets emu-asan and emu-tsan, docs/emulation.md): what AddressSanitizer must be told
// that it cannot see for itself, the switches between the fibers' stacks. No-ops in every other build.
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define MNISTDP_EMU_ASAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace mnistdp::emu::sanitizer {

#if defined(MNISTDP_EMU_ASAN)
constexpr bool kAddress = true;
#else
constexpr bool kAddress = false;
#endif

// A stack's lowest address and size.
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

// Just before switching to the stack `target`. `fake_stack` is the leaving context's own slot (a local on its
// stack), to hand back to finish_stack_switch when it runs again; nullptr when it never will.
inline void start_stack_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] StackBounds target) {
#if defined(MNISTDP_EMU_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, target.bottom, target.size);
#endif
}

// First thing on the stack switched to: `fake_stack` is what this context saved when it left (nullptr on its
// first run). Returns the bounds of the stack that left.
inline StackBounds finish_stack_switch([[maybe_unused]] void* fake_stack) {
  StackBounds left;
#if defined(MNISTDP_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, &left.bottom, &left.size);
#endif
  return left;
}

// Has `callback` run after a sanitizer's report, on the thread that made it, before the process ends: a
// report names host functions and lines, and the callback adds the emulated thread that ran them.
inline void after_report([[maybe_unused]] void (*callback)()) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  __sanitizer_set_death_callback(callback);
#endif
}

}  // namespace mnistdp::emu::sanitizer
