#pragma once
// One block of an emulated kernel: its threads as fibers on the calling OS thread, scheduled between their
// synchronisation points in the configured order (config.hpp). A thread runs without interruption until it
// reaches a barrier, a warp collective or grid.sync(), or returns; a fiber is taken only by a thread that
// waits, so a kernel without barriers runs its threads one after another on one fiber.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "emu/launch.hpp"
#include "emu/src/checks/block_events.hpp"

namespace mnistdp::emu {

// The barrier every block of a cooperative launch reaches at grid.sync(). A failing block aborts it, so that
// the others stop rather than wait forever.
class GridBarrier {
 public:
  explicit GridBarrier(int blocks) : blocks_(blocks) {}
  // Returns false when the grid was aborted.
  bool arrive_and_wait();
  void abort();
  // The race checks' token of the grid.sync() that ends phase `phase` (counted from 0 in every block): the
  // threads release into it as they arrive and acquire it as they leave. Two, by parity: no thread can
  // arrive at the next but one before every thread has left this one.
  const checks::SyncPoint& token(std::uint64_t phase) const { return tokens_[phase % 2]; }

 private:
  checks::SyncPoint tokens_[2];
  std::mutex mutex_;
  std::condition_variable changed_;
  int blocks_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
};

// A block's part in a chain of programmatic launches (launch.cpp, MNISTDP_EMU_PDL=overlap): the kernel before
// it in the chain, and the kernel after. Both calls block the calling OS thread, and with it the whole block.
class ProgrammaticLink {
 public:
  virtual ~ProgrammaticLink() = default;
  // Whether a kernel before this one is still part of the chain (so that cudaGridDependencySynchronize()
  // must wait for it).
  virtual bool has_previous() const = 0;
  // Whether a kernel after this one is part of the chain (so that a trigger may hold the block).
  virtual bool has_next() const = 0;
  // A thread of the block has called cudaTriggerProgrammaticLaunchCompletion(), the block's first call:
  // returns once the next kernel's blocks have each run up to their wait. False when the chain was aborted
  // by a fault elsewhere.
  virtual bool block_triggered() = 0;
  // Threads of the block wait in cudaGridDependencySynchronize() and none of the others can run: returns
  // once the kernel before has completed. False when the chain was aborted.
  virtual bool wait_for_previous() = 0;
  // The race checks' token that the kernel before released into as its threads exited (null when there is
  // none): a thread acquires it as it returns from cudaGridDependencySynchronize().
  virtual const checks::SyncPoint* previous_end() const = 0;
};

// Runs block `block` of the launch on the calling OS thread. `grid` is the launch's grid barrier (nullptr
// unless the launch is cooperative). Throws Fault (engine.hpp) naming the kernel, the block and the thread
// when the kernel misuses a barrier or a collective, deadlocks, or a thread's code throws. `seed` varies the
// adversarial order between launches and blocks. `link` is the block's part in a chain of programmatic
// launches, or nullptr. `checks` are what the launch's checks hand each block (checks/block_events.hpp).
// Whether `address` lies in the shared memory of the block running on this OS thread (its dynamic shared
// memory, or one of its shared variables); if so, where that memory begins and how long it is.
bool block_shared_memory(std::uintptr_t address, std::uintptr_t* begin, std::size_t* bytes);

// The running emulated thread's access at `address` of an object of `type` breaks that type's `alignment`:
// its block ends at its next switch with cudaErrorMisalignedAddress (a Fault naming the kernel, the block,
// the thread and the address), as a GPU ends the kernel. False, doing nothing, outside an emulated kernel.
bool misaligned_access(std::uintptr_t address, unsigned alignment, const char* type);

void run_block(const LaunchSpec& spec, const std::function<void()>& body, uint3 block, GridBarrier* grid,
               std::uint64_t seed, ProgrammaticLink* link, checks::LaunchChecks checks);

}  // namespace mnistdp::emu
