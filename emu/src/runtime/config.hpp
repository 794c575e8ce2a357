#pragma once
// The emulated machine, read once from the environment (docs/emulation.md):
//   MNISTDP_EMU_DEVICES  number of emulated GPUs (default 1; 0 behaves as a machine without a GPU)
//   MNISTDP_EMU_SMS      streaming multiprocessors per device (default 8): cooperative launches and occupancy
//   MNISTDP_EMU_ORDER    adversarial (default): a block's threads in a seeded shuffled order and the ready
//                        operations of independent streams latest first; in-order: thread 0 first and streams
//                        oldest first, the order to step through in a debugger
//   MNISTDP_EMU_SEED     the seed of the adversarial order and of the chunks of NCCL's ring (default 1)
//   MNISTDP_EMU_PDL      overlap (default): a programmatic launch's blocks (on a stream, or a graph's
//                        programmatic edge) start once every block of the kernel before has triggered (a
//                        thread's cudaTriggerProgrammaticLaunchCompletion) or exited, and
//                        run up to their cudaGridDependencySynchronize() while that kernel is held after its
//                        trigger, so that a read of its output before the wait sees the old values; serial:
//                        the dependent kernel starts after its primary has finished
//   MNISTDP_EMU_BLOCK_RACES  1: check every launch for races between its blocks (block_races.hpp; only in a
//                        build with the CMake option MNISTDP_EMU_BLOCK_RACES, which has the kernels report
//                        their accesses); 0 (default): not
//   MNISTDP_EMU_FAILING_DEVICE  a device that fails every call touching it (cudaErrorDevicesUnavailable), as
//                        a GPU that does not answer; for tests of what the rest of the machine then does
// and, read afresh whenever a communicator is made (so that a test may change them between communicators),
// NCCL's latitude with a non-blocking communicator (ncclConfig_t::blocking = 0) and a failure to plant in
// one:
//   MNISTDP_EMU_NCCL_POLLS  N (default 3): each call on a non-blocking communicator (its
//   ncclCommInitRankConfig,
//                        each ncclAllReduce, ncclCommFinalize) returns ncclInProgress and completes at the
//                        1st to Nth next poll of ncclCommGetAsyncError, a number drawn from MNISTDP_EMU_SEED
//                        and the call's place; 0: each completes within the call
//   MNISTDP_EMU_NCCL_FAIL   CALL:N:RESULT: the Nth call CALL (ncclCommInitRankConfig, ncclAllReduce or
//                        ncclCommFinalize) on each non-blocking communicator ends, when it completes, with
//                        RESULT (ncclSystemError, ncclInternalError or ncclRemoteError) as the communicator's
//                        asynchronous error, its collective held on its stream until ncclCommAbort; or with
//                        RESULT `hang`: it never completes (an all-reduce: posted, and held until the abort)
#include <cstdint>
#include <string>

namespace mnistdp::emu {

enum class Order { adversarial, in_order };

struct Config {
  int devices = 1;
  int sms = 8;
  Order order = Order::adversarial;
  std::uint64_t seed = 1;
  int failing_device = -1;
  bool programmatic_overlap = true;
  bool block_races = false;
};

// Throws std::runtime_error naming the variable when one is malformed.
const Config& config();

struct NcclConfig {
  int max_polls = 3;
  std::string fail_call;    // empty: nothing planted
  int fail_nth = 0;         // 1: the first such call
  std::string fail_result;  // "ncclRemoteError", ..., or "hang"
};

// Read from the environment at each call; throws std::runtime_error naming the variable when one is
// malformed.
NcclConfig nccl_config();

// A well-mixed 64-bit hash of its inputs (splitmix64 steps), for the seeded orders.
std::uint64_t mix(std::uint64_t a, std::uint64_t b);

}  // namespace mnistdp::emu
