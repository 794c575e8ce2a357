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

namespace mnistdp::emu {

// The barrier every block of a cooperative launch reaches at grid.sync(). A failing block aborts it, so that
// the others stop rather than wait forever.
class GridBarrier {
 public:
  explicit GridBarrier(int blocks) : blocks_(blocks) {}
  // Returns false when the grid was aborted.
  bool arrive_and_wait();
  void abort();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int blocks_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
};

// Runs block `block` of the launch on the calling OS thread. `grid` is the launch's grid barrier (nullptr
// unless the launch is cooperative). Throws Fault (engine.hpp) naming the kernel, the block and the thread
// when the kernel misuses a barrier or a collective, deadlocks, or a thread's code throws. `seed` varies the
// adversarial order between launches and blocks.
void run_block(const LaunchSpec& spec, const std::function<void()>& body, uint3 block, GridBarrier* grid,
               std::uint64_t seed);

}  // namespace mnistdp::emu
