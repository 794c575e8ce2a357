#pragma once
// A block's events, as the scheduler of its threads (device/block.cpp) tells them to the checks: the one
// interface between the two. The scheduler says what happens (a block starts and runs, a thread starts,
// resumes, enters a builtin and exits, a barrier or a warp collective is reached and left, a grid phase
// begins, a stack is switched); each check hears of it here, in the calls below, and nowhere else. A new
// check is a file of its own with its calls added here. Each event is an inline call resolved at compile
// time: a check the build lacks costs nothing, and none costs a virtual call. What a kernel's own code does
// between those events does not pass through here: its loads and stores reach the checks of addresses and of
// races between blocks from the instrumentation of the kernels' files, and its __threadfence() and atomicAdd
// from the dialect (block_races.cpp's hooks and builtins, device_shadow.cpp's), one call each, as directly
// as the hot path needs.
//
// The checks behind it:
//   sanitizer.hpp         the sanitizers' fibers and, in preset emu-tsan, the race checks' identities and
//                         synchronisations (namespace race)
//   device_shadow.hpp     the host memory a kernel's threads may touch, for the check of addresses
//   device_addresses.hpp  the check of a kernel's addresses, told where the running thread's stack is
//   block_races.hpp       the check of races between blocks, told of the block, its barriers and phases
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/launch.hpp"
#include "emu/src/checks/block_races.hpp"
#include "emu/src/checks/device_addresses.hpp"
#include "emu/src/checks/device_shadow.hpp"
#include "emu/src/checks/sanitizer.hpp"

namespace mnistdp::emu::checks {

// A synchronisation point of the race checks: what is released into it happens before whatever acquires
// it afterwards (race::Token). Does nothing outside the race checks' build.
using SyncPoint = race::Token;

// A stack's lowest address and size, as the sanitizers are told of a switch to it.
using StackBounds = sanitizer::StackBounds;

// What the checks of a kernel launch hand each of its blocks: every thread acquires `start` before it runs
// and releases into `end` as it exits (null outside the race checks' build); and the launch's record of the
// blocks' accesses (block_races.hpp; null unless block_races::wanted()).
struct LaunchChecks {
  const SyncPoint* start = nullptr;
  const SyncPoint* end = nullptr;
  block_races::Launch* accesses = nullptr;
};

// The stack of an emulated thread: a sanitizer's instrumented frames need four times the room.
constexpr std::size_t kThreadStackBytes = sanitizer::kAny ? std::size_t{1} << 20 : std::size_t{256} << 10;

// Host memory that the kernel's threads own (a slab of their stacks, a block's shared memory): they may touch
// it from now on, and no longer.
inline void memory_owned(const void* begin, std::size_t bytes) {
  device_shadow::allow(begin, bytes);
}
inline void memory_disowned(const void* begin, std::size_t bytes) {
  device_shadow::disallow(begin, bytes);
}

// Just before switching to the stack `target`. `fake_stack` is the leaving context's own slot (a local on its
// stack), to hand back to stack_switched when it runs again; nullptr when it never will.
inline void stack_switching(void** fake_stack, StackBounds target) {
  sanitizer::start_stack_switch(fake_stack, target);
}
// First thing on the stack switched to: `fake_stack` is what this context saved when it left (nullptr on its
// first run). Returns the bounds of the stack that left.
inline StackBounds stack_switched(void* fake_stack) {
  return sanitizer::finish_stack_switch(fake_stack);
}

// Has `callback` run after a sanitizer's report, on the thread that made it: it names the emulated thread.
inline void on_report(void (*callback)()) {
  sanitizer::after_report(callback);
}

// While alive, a builtin runs: the emulator's code, called by a kernel's, whose host accesses are not the
// kernel's (device_addresses.hpp).
class InBuiltin {
 public:
  InBuiltin() = default;
  InBuiltin(const InBuiltin&) = delete;
  InBuiltin& operator=(const InBuiltin&) = delete;

 private:
  device_addresses::EmulatorCode emulator_;
};

// While alive, the emulator uses the block's storage, which other threads used before: the race checks do
// not see it.
class BlockStorage {
 public:
  BlockStorage() = default;
  BlockStorage(const BlockStorage&) = delete;
  BlockStorage& operator=(const BlockStorage&) = delete;

 private:
  race::IgnoreAccesses unseen_;
};

// The checks' part of one block, which the block's scheduler keeps and tells of its events; reused, like
// the block's storage, from one block to the next on the same OS thread.
class BlockEvents {
 public:
  // A block of `threads` threads, with `barriers` named barriers and `warps` warps, starts on the calling OS
  // thread, inside a BlockStorage.
  void block_starts(LaunchChecks launch, int threads, std::size_t barriers, std::size_t warps) {
    home_ = race::current();
    home_start_ = &race::os_thread_start();
    launch_ = launch;
    barriers_ = barriers;
    illegal_ = {};
    if constexpr (race::kEnabled) {
      identities_.assign(static_cast<std::size_t>(threads), nullptr);
      // Two points for each named barrier and each warp's collectives, by parity (GridBarrier::token).
      sync_points_ = std::make_unique<SyncPoint[]>(2 * (barriers + warps));
    }
  }

  // The block's threads are about to run on this OS thread (`block`: its linear index in the grid), and then
  // have stopped, whether they all returned or one faulted.
  void block_runs(const LaunchSpec& spec, unsigned block) {
    block_races::enter(launch_.accesses, block);
    device_addresses::enter(spec.device, spec.name, illegal_, spec.parameters, spec.parameter_bytes);
  }
  void block_stops() {
    block_races::leave();
    device_addresses::leave();
  }

  // The block has ended: the race checks' identities of its threads go (inside a BlockStorage).
  void block_ends() {
    if constexpr (race::kEnabled) {
      for (race::Identity& id : identities_)
        race::retire(std::exchange(id, nullptr));
    }
  }

  // Whether a thread of the block has touched an illegal address (device_addresses.hpp), and its message:
  // the block stops at its next switch, as a GPU stops the kernel.
  bool illegal_address() const { return illegal_.seen; }
  const std::string& illegal_address_message() const { return illegal_.message; }

  // Thread `t` is about to run its kernel code, on the stack where the calling frame lies: its own identity,
  // with no history but the kernel's start, on a stack region that remembers no other thread's accesses.
  // `name()` names it in the race checks' reports (called only in their build).
  template <typename Name>
  void thread_starts(int t, const Name& name) {
    if constexpr (race::kEnabled) {
      identities_[static_cast<std::size_t>(t)] = race::create(name());
      // The frames of the kernel's code lie below this one; 16 KiB holds the deepest of the project's.
      constexpr std::size_t kFrames = 16 << 10;
      const auto top = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) & ~std::uintptr_t{15};
      race::forget(reinterpret_cast<const void*>(top - kFrames), kFrames);
      to_thread(t);
      home_start_->acquire();
      if (launch_.start) launch_.start->acquire();
    }
  }
  // The running thread returned from its kernel code.
  void thread_exits() {
    if constexpr (race::kEnabled) {
      if (launch_.end) launch_.end->release();
      to_home();
    }
  }
  // A thread starts or resumes on its stack, [stack.bottom, stack.bottom + stack.size).
  static void thread_resumes(StackBounds stack) { device_addresses::running_stack(stack.bottom, stack.size); }

  // The race checks' identities: thread `t`'s while its kernel code runs (to_thread), the block's home (the
  // OS thread's, or the engine's) while the emulator's code does, from a builtin's call to its return.
  void to_thread(int t) {
    if constexpr (race::kEnabled) race::become(identities_[static_cast<std::size_t>(t)]);
  }
  void to_home() {
    if constexpr (race::kEnabled) race::become(home_);
  }

  // The synchronisation points of named barrier `id` in its phase `phase`, and of warp `warp`'s collectives
  // in their generation `generation`: null outside the race checks' build.
  const SyncPoint* barrier_point(int id, std::uint64_t phase) const {
    if (!sync_points_) return nullptr;
    return &sync_points_[2 * static_cast<std::size_t>(id) + phase % 2];
  }
  const SyncPoint* warp_point(int warp, std::uint64_t generation) const {
    if (!sync_points_) return nullptr;
    return &sync_points_[2 * (barriers_ + static_cast<std::size_t>(warp)) + generation % 2];
  }
  // The running thread reaches a synchronisation (a barrier, a collective that orders memory, grid.sync()):
  // what it did before happens before what every thread that leaves it does after.
  static void arrives(const SyncPoint* point) {
    if (point) point->release();
  }
  static void leaves(const SyncPoint* point) {
    if (point) point->acquire();
  }

  // __syncthreads() has released the block's threads: a fence before it, or what a thread acquired, counts
  // for all of them after it (block_races.hpp).
  static void block_barrier_released() { block_races::block_barrier(); }
  // grid.sync() has released the grid's blocks: phase `phase` of the launch begins.
  static void grid_phase_begins(std::uint64_t phase) { block_races::set_phase(phase); }
  // The running thread returns from cudaGridDependencySynchronize(): what the kernel before did (its end,
  // null when there is none) happens before what the thread does next.
  static void programmatic_wait_passed(const SyncPoint* previous_end) {
    leaves(previous_end);
    block_races::passed_programmatic_wait();
  }

 private:
  race::Identity home_ = nullptr;             // the race checks' identity of the emulator's code
  const SyncPoint* home_start_ = nullptr;     // race::os_thread_start() of the block's OS thread
  std::vector<race::Identity> identities_;    // by thread, once it has started
  std::unique_ptr<SyncPoint[]> sync_points_;  // barrier_point(), warp_point()
  std::size_t barriers_ = 0;
  LaunchChecks launch_;
  device_addresses::IllegalAccess illegal_;  // the block's first access to an illegal address
};

}  // namespace mnistdp::emu::checks
