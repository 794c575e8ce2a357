#pragma once
// The sanitizer builds (presets emu-asan and emu-tsan, docs/emulation.md): what the sanitizers must be told
// that they cannot see for themselves. AddressSanitizer: the switches between the fibers' stacks.
// ThreadSanitizer (namespace race): which emulated thread or device operation is running, and every
// synchronisation the CUDA model defines. No-ops in every other build.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/src/runtime/history.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define MNISTDP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's way of saying it
#define MNISTDP_EMU_ASAN 1
#endif
#endif
#if defined(MNISTDP_EMU_ASAN) || defined(__SANITIZE_THREAD__) || defined(MNISTDP_EMU_RACE_CHECKS)
#define MNISTDP_EMU_ANY_SANITIZER 1
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(MNISTDP_EMU_RACE_CHECKS)
#include <sanitizer/tsan_interface.h>
extern "C" {
// ThreadSanitizer's annotations, which its runtime exports but no header of clang 14 declares.
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
void __tsan_java_alloc(unsigned long start, unsigned long bytes);
void __tsan_java_free(unsigned long start, unsigned long bytes);
}
#endif

// The sanitizers' runtimes as this file calls them: their own entry points where the build has them, and
// stand-ins that do nothing where it has not, so that the code after this is the same in every build.
namespace mnistdp::emu::sanitizer::runtime {

#if defined(MNISTDP_EMU_ASAN)
constexpr bool kAddress = true;
inline void start_switch_fiber(void** fake_stack, const void* bottom, std::size_t size) {
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
inline void finish_switch_fiber(void* fake_stack, const void** bottom, std::size_t* size) {
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
}
#else
constexpr bool kAddress = false;
inline void start_switch_fiber(void**, const void*, std::size_t) {}
inline void finish_switch_fiber(void*, const void**, std::size_t*) {}
#endif

#if defined(MNISTDP_EMU_ANY_SANITIZER)
constexpr bool kAny = true;
inline void set_death_callback(void (*callback)()) {
  __sanitizer_set_death_callback(callback);
}
#else
constexpr bool kAny = false;
inline void set_death_callback(void (*)()) {}
#endif

#if defined(MNISTDP_EMU_RACE_CHECKS)
constexpr bool kRaces = true;
inline void ignore_accesses_begin() {
  __tsan_ignore_thread_begin();
}
inline void ignore_accesses_end() {
  __tsan_ignore_thread_end();
}
inline void ignore_sync_begin() {
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
}
inline void ignore_sync_end() {
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
inline void release(void* address) {
  __tsan_release(address);
}
inline void acquire(void* address) {
  __tsan_acquire(address);
}
inline void* current_fiber() {
  return __tsan_get_current_fiber();
}
inline void* create_fiber(const char* name) {
  void* fiber = __tsan_create_fiber(0);
  __tsan_set_fiber_name(fiber, name);
  return fiber;
}
inline void destroy_fiber(void* fiber) {
  __tsan_destroy_fiber(fiber);
}
inline void switch_to_fiber(void* fiber) {
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
}
inline void forget(unsigned long start, unsigned long bytes) {
  __tsan_java_alloc(start, bytes);
  __tsan_java_free(start, bytes);
}
#else
constexpr bool kRaces = false;
inline void ignore_accesses_begin() {}
inline void ignore_accesses_end() {}
inline void ignore_sync_begin() {}
inline void ignore_sync_end() {}
inline void release(void*) {}
inline void acquire(void*) {}
inline void* current_fiber() {
  return nullptr;
}
inline void* create_fiber(const char*) {
  return nullptr;
}
inline void destroy_fiber(void*) {}
inline void switch_to_fiber(void*) {}
inline void forget(unsigned long, unsigned long) {}
#endif

}  // namespace mnistdp::emu::sanitizer::runtime

namespace mnistdp::emu::sanitizer {

// Whether the build runs under AddressSanitizer; under any sanitizer (whose instrumented frames need more
// stack).
constexpr bool kAddress = runtime::kAddress;
constexpr bool kAny = runtime::kAny;

// A stack's lowest address and size.
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

// Just before switching to the stack `target`. `fake_stack` is the leaving context's own slot (a local on its
// stack), to hand back to finish_stack_switch when it runs again; nullptr when it never will.
inline void start_stack_switch(void** fake_stack, StackBounds target) {
  runtime::start_switch_fiber(fake_stack, target.bottom, target.size);
}

// First thing on the stack switched to: `fake_stack` is what this context saved when it left (nullptr on its
// first run). Returns the bounds of the stack that left.
inline StackBounds finish_stack_switch(void* fake_stack) {
  StackBounds left;
  runtime::finish_switch_fiber(fake_stack, &left.bottom, &left.size);
  return left;
}

// Has `callback` run after a sanitizer's report, on the thread that made it, before the process ends: a
// report names host functions and lines, and the callback adds the emulated thread that ran them.
inline void after_report(void (*callback)()) {
  runtime::set_death_callback(callback);
}

}  // namespace mnistdp::emu::sanitizer

// The race checks of preset emu-tsan. ThreadSanitizer orders two accesses only through the synchronisations
// it sees; here each emulated CUDA thread, and each device operation (a copy, a collective, a kernel as a
// whole), is an identity of its own (a TSan fiber) that starts with no history, and learns another's history
// only through a Token the CUDA model defines: a barrier, a warp collective, grid.sync(), a kernel's start
// and end, a stream's order, an event, the programmatic wait, a host's synchronisation. The emulator's own
// bookkeeping runs as the OS thread's identity, whose locks order nothing for the emulated threads. So a
// missing synchronisation is reported whatever order the fibers happened to run in, as far back as the
// runtime's history reaches (retire(); docs/emulation.md, "How far back it sees").
namespace mnistdp::emu::race {

constexpr bool kEnabled = sanitizer::runtime::kRaces;
namespace runtime = sanitizer::runtime;

// While alive, the running identity's accesses are not recorded (the emulator's allocations and frees, which
// the emulated threads' accesses to the same memory would otherwise race with).
class IgnoreAccesses {
 public:
  IgnoreAccesses() { runtime::ignore_accesses_begin(); }
  ~IgnoreAccesses() { runtime::ignore_accesses_end(); }
  IgnoreAccesses(const IgnoreAccesses&) = delete;
  IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;
};

// While alive, the running identity's locks and thread creations order nothing (the emulator's locks taken
// on an emulated thread's behalf, and the creation of identities that must start with no history).
class IgnoreSync {
 public:
  IgnoreSync() { runtime::ignore_sync_begin(); }
  ~IgnoreSync() { runtime::ignore_sync_end(); }
  IgnoreSync(const IgnoreSync&) = delete;
  IgnoreSync& operator=(const IgnoreSync&) = delete;
};

// A synchronisation point: what is released into it happens before whatever acquires it afterwards. Its
// storage is its own heap cell, so that freeing the token forgets its history (a reused address would carry
// it into the next kernel).
class Token {
 public:
  // The check of races between operations (operation_races.hpp) keeps here, in a device operation's token,
  // the history of what is ordered before the operation: the host's at its enqueue, then its own once done.
  mutable History history;

  Token() {
    if constexpr (kEnabled) {
      IgnoreAccesses quiet;
      cell_.reset(new std::uint64_t(0));
    }
  }
  ~Token() {
    if constexpr (kEnabled) {
      IgnoreAccesses quiet;
      cell_.reset();
    }
  }
  Token(const Token&) = delete;
  Token& operator=(const Token&) = delete;

  void release() const { runtime::release(cell_.get()); }
  void acquire() const { runtime::acquire(cell_.get()); }

 private:
  std::unique_ptr<std::uint64_t> cell_;  // null outside the race checks
};

// An identity (a TSan fiber), or none outside the race checks.
using Identity = void*;

inline Identity current() {
  return runtime::current_fiber();
}

// A new identity with no history, named in reports.
inline Identity create(const std::string& name) {
  const IgnoreSync no_parent;
  return runtime::create_fiber(name.c_str());
}

inline void destroy(Identity id) {
  if (id) runtime::destroy_fiber(id);
}

// How many ended identities are kept before they go (retire()).
constexpr std::size_t kRetained = 8192;

// An identity whose emulated thread or operation has ended, kept until kRetained more have ended. clang 14's
// ThreadSanitizer reports a race only while it can still show the earlier access's stack, which it keeps for
// the last 64 ended identities: destroyed at once, a race with an access made more than 64 emulated threads
// back went unreported (blocks of 8 threads, each writing where the block d blocks before wrote: reported for
// d <= 8 only). Kept, they cost ThreadSanitizer's memory: 1.2 GB more in the test of one training step.
inline void retire(Identity id) {
  if constexpr (!kEnabled) return;
  struct Retained {
    std::mutex mutex;
    std::deque<Identity> ids;
  };
  static auto* const retained = new Retained;  // never freed: it may be used during static destruction
  Identity oldest = nullptr;
  {
    const IgnoreAccesses unseen;
    const IgnoreSync unordered;  // its lock orders nothing between the identities that retire
    std::lock_guard lock(retained->mutex);
    retained->ids.push_back(id);
    if (retained->ids.size() > kRetained) {
      oldest = retained->ids.front();
      retained->ids.pop_front();
    }
  }
  destroy(oldest);
}

// The calling OS thread runs as `id` from now on, with no synchronisation implied.
inline void become(Identity id) {
  runtime::switch_to_fiber(id);
}

// The calling OS thread's start, released once by its own identity: ThreadSanitizer takes a thread to write
// its whole thread-local storage as it starts, and the emulated threads it runs read their built-in variables
// (threadIdx...) there, so they acquire this first.
inline const Token& os_thread_start() {
  thread_local const Token token;
  thread_local const bool released = (token.release(), true);
  static_cast<void>(released);
  return token;
}

// Forgets the accesses recorded to [memory, memory + bytes): the region of a fiber's stack that a new
// emulated thread's frames will use, where the last thread's locals would otherwise race with its own. clang
// 14's runtime ignores AnnotateNewMemory; its Java interface's allocation resets the range, and its free
// drops the block the allocation recorded.
inline void forget(const void* memory, std::size_t bytes) {
  runtime::forget(reinterpret_cast<unsigned long>(memory), bytes);
}

// An OS thread of the emulator's (a cooperative block's, a programmatic chain's) that runs `body`: it starts
// with no history, as what its emulated threads may learn comes through the kernel's tokens (and
// os_thread_start()), and its own accesses are not recorded, as the emulated threads' are.
template <class Body>
std::thread spawn(Body body) {
  const IgnoreSync no_parent;
  return std::thread([body = std::move(body)]() mutable {
    const IgnoreAccesses bookkeeping;
    body();
  });
}

// The identity of the engine's OS thread, where the emulator's bookkeeping of a kernel runs.
inline Identity& engine_identity() {
  thread_local Identity id = nullptr;
  return id;
}

// A device operation's identity, for as long as the operation runs: it starts with the history of what the
// operation waits for (its stream's order, events, the host's enqueue) and hands its own to `done`.
class Operation {
 public:
  explicit Operation(const std::vector<const Token*>& after) {
    if constexpr (kEnabled) {
      home_ = current();
      id_ = create("emulated device operation");
      become(id_);
      for (const Token* t : after)
        if (t) t->acquire();
    }
  }
  ~Operation() {
    if constexpr (kEnabled) {
      become(home_);
      retire(id_);
    }
  }
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  void finish(const std::vector<const Token*>& done) const {
    for (const Token* t : done)
      if (t) t->release();
  }

 private:
  Identity home_ = nullptr;
  Identity id_ = nullptr;
};

// Inside an Operation, the run of a kernel (or of a chain of programmatic launches): the operation's history
// goes to `start`, which every thread acquires first; the engine's identity does the bookkeeping; at the end
// the operation takes `ends`, which every thread released into as it exited.
class KernelRun {
 public:
  KernelRun(const Token& start, std::vector<const Token*> ends) : ends_(std::move(ends)) {
    if constexpr (kEnabled) {
      start.release();
      operation_ = current();
      if (engine_identity()) become(engine_identity());
    }
  }
  ~KernelRun() {
    if constexpr (kEnabled) {
      become(operation_);
      for (const Token* end : ends_)
        end->acquire();
    }
  }
  KernelRun(const KernelRun&) = delete;
  KernelRun& operator=(const KernelRun&) = delete;

 private:
  std::vector<const Token*> ends_;
  Identity operation_ = nullptr;
};

}  // namespace mnistdp::emu::race
