#pragma once
// The emulator's own check of races between the blocks of one kernel launch (MNISTDP_EMU_BLOCK_RACES, on in
// preset emu-asan; docs/emulation.md, "Races between blocks"). ThreadSanitizer's runtime tells apart at most
// 256 identities at once, so once a block of 256 threads or more has passed a barrier it is ordered after
// whatever the blocks before it did, and a race between two such blocks goes unreported. This check needs no
// history: for every word of device memory a launch touches (every byte, for byte and half-word accesses), it
// keeps which block last wrote it and which block read it, in which phase (the grid.sync() intervals of a
// cooperative launch; a single phase otherwise). Two blocks that touch one word in one phase, one of them
// writing, race, in whatever order the blocks ran, unless a flag orders them as the PTX ISA's memory model
// allows it: the writer's thread makes a __threadfence() after its access and then an atomic write, and the
// other thread's atomic read sees that write (or a later one of the same word) and is followed by a
// __threadfence() of its own before its access; a block's __syncthreads() hands a fence before it, and what
// a thread acquired, on to the block's other threads. Nothing weaker orders them: an atomic without both
// fences, or a fence without an atomic between, is reported, however the blocks happened to interleave.
//
// The kernels are compiled with SanitizerCoverage's load and store callbacks in such a build
// (emu/cmake/cuda_sources.cmake), which this file's hooks receive; in every other build nothing calls them.
// The hooks also feed the check of races between operations (operation_races.hpp), which the same setting
// turns on.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "emu/launch.hpp"
#include "emu/src/checks/operation_races.hpp"
#include "emu/src/runtime/memory.hpp"

namespace mnistdp::emu::block_races {

#if defined(MNISTDP_EMU_BLOCK_RACES)
constexpr bool kEnabled = true;
#else
constexpr bool kEnabled = false;
#endif

// An allocation's bytes [begin, end), or the gap between two allocations (allocation null).
struct Span {
  std::uintptr_t begin = 0, end = 0;
  const Allocation* allocation = nullptr;
};

// What one thread has learned of other blocks' threads through atomics, by their launch-wide number
// (block * threads a block + thread): the count of __threadfence() calls each had made before an atomic
// write that this thread's atomic reads saw, before this thread's own next fence (`pending`) and after it
// (`acquired`). An access of that thread made before its fence number n is ordered before this thread's
// accesses once acquired holds more than n for it.
struct Seen {
  std::unordered_map<std::uint64_t, std::uint32_t> pending, acquired;
};

// One launch's record of who touched each word of device memory, and its part in the check of races between
// operations (operation_races.hpp).
class Launch {
 public:
  // Takes the allocations live now: only device and pinned memory are checked (a block's shared memory and
  // its threads' stacks are its own, and their storage is reused from block to block). `place`: the
  // launch's among the operations (operation_races::Step::place_of), none outside one.
  Launch(const LaunchSpec& spec, const operation_races::Place& place);
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // An access of `bytes` at `address` by thread `thread` (linear) of block `block` (linear), in `phase`,
  // before or after (`waited`) the thread's cudaGridDependencySynchronize(). `last` is the calling OS
  // thread's hint: the span its last access lay in, updated here.
  // `fences`: the __threadfence() calls the thread has made; `seen`: what it has learned through atomics,
  // or null.
  void access(const void* address, unsigned bytes, bool write, unsigned block, unsigned thread,
              std::uint64_t phase, bool waited, std::uint32_t fences, const Seen* seen, Span& last);

  // The atomic add of `bytes` (4 or 8) at `address` by that thread, made under the record's lock so that
  // what it reads and what the record says it read are the same: what the word's earlier atomic writes
  // published goes into `seen`'s pending, and this one's publication is recorded. Returns the old value.
  // `fences_at_barrier`: the block's threads' fences as of its last __syncthreads(), published too.
  std::uint64_t atomic_add(void* address, std::uint64_t value, unsigned bytes, unsigned block,
                           unsigned thread, std::uint32_t fences,
                           const std::vector<std::uint32_t>& fences_at_barrier, Seen& seen);

  // Throws Fault (cudaErrorLaunchFailure) naming the kernel, the blocks and threads or the operations, and
  // the allocation of the first race found; does nothing when there was none.
  void check() const;

  // Who touched a word of device memory: public, with the table of words, for the pool of tables that
  // block_races.cpp keeps.
  // 16 bytes, so that a word's record fills one cache line: the check looks one up on every access. A phase
  // is a count of grid.sync() calls, far below 2^32.
  struct Touch {
    unsigned block = 0, thread = 0;
    std::uint32_t phase = ~std::uint32_t{0};  // none yet
    std::uint32_t fences = 0;                 // the thread's __threadfence() calls before the access
  };
  struct alignas(64) Word {
    std::uintptr_t address = 0;
    std::uint64_t generation = 0;  // another than the table's: a free slot
    Touch writer;
    Touch reader;        // the first reader of the reader's phase
    Touch other_reader;  // the first reader from another block than `reader`'s, in that phase
  };
  static_assert(sizeof(Word) == 64);
  // An open-addressed table of a power-of-two size, kept at most half full: the check runs on every access.
  // Its storage goes from one launch to the next: a new table of 64 Ki words a launch cost more in page
  // faults than the check itself. Each launch takes it with a generation of its own, so that the last
  // launch's words read as free slots without clearing them.
  struct Table {
    std::vector<Word> words;
    std::uint64_t generation = 0;
  };

 private:
  Span span_of(std::uintptr_t address) const;
  Word& find(std::uintptr_t address);
  void word(std::uintptr_t address, bool write, const Touch& now, const Seen* seen);
  // Whether `then`, another block's access, is ordered before `now` through a flag (Seen).
  bool ordered(const Touch& then, const Seen* seen) const;
  std::uint64_t launch_thread(const Touch& t) const;
  void report(std::uintptr_t address, const char* now_does, const Touch& now, const char* then_did,
              const Touch& then, const Seen* seen);
  void report(std::uintptr_t address, bool write, const Touch& now, bool waited,
              const operation_races::Conflict& then);
  std::string where(std::uintptr_t address) const;
  std::string thread_name(const Touch& t) const;

  const LaunchSpec& spec_;
  std::vector<Allocation> allocations_;  // by base address
  std::optional<operation_races::Launch> operations_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  Table table_;
  std::size_t used_ = 0;
  std::string first_race_;
  std::uint64_t races_ = 0;
  // By word written atomically: each writer's (launch-wide thread number's) most fences before such a write.
  // Atomic adds only: each reads the last, so one that sees the word sees every publication before it.
  std::unordered_map<std::uintptr_t, std::unordered_map<std::uint64_t, std::uint32_t>> published_;
};

// Whether this run checks its launches: a build with the callbacks, and MNISTDP_EMU_BLOCK_RACES=1.
bool wanted();

// The running block's part, set on its OS thread while its threads run (block.cpp): the hooks find the
// launch, the block and the phase here, and the thread in the built-in variables.
void enter(Launch* launch, unsigned block);
void set_phase(std::uint64_t phase);
// The running emulated thread has returned from cudaGridDependencySynchronize().
void passed_programmatic_wait();
// The running emulated thread's __threadfence() and atomic add (the dialect's, through builtins.hpp).
void fence();
// The running block's __syncthreads() has released its threads: a fence before it, or what a thread acquired,
// counts for all of them after it.
void block_barrier();
std::uint64_t atomic_add(void* address, std::uint64_t value, unsigned bytes);
void leave();

}  // namespace mnistdp::emu::block_races
