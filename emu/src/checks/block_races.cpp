#include "emu/src/checks/block_races.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "emu/builtins.hpp"
#include "emu/src/checks/device_addresses.hpp"
#include "emu/src/checks/sanitizer.hpp"
#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"

namespace mnistdp::emu::block_races {
namespace {

// What the hooks need of the running block. Not ThreadSanitizer-instrumented (emu/CMakeLists.txt), like the
// rest of this file: the check's own bookkeeping must order nothing for the race checks.
struct Running {
  unsigned block = 0;
  std::uint64_t phase = 0;
  Span last;  // the allocation, or the gap between two, of the last access: most accesses hit it again
  std::vector<bool> waited;           // by linear thread: has returned from cudaGridDependencySynchronize()
  std::vector<std::uint32_t> fences;  // by linear thread: its __threadfence() calls
  std::unordered_map<unsigned, Seen> seen;  // by linear thread, once it has made an atomic add
  // Each thread's fences as of the block's last __syncthreads(), which an atomic write of any of the block's
  // threads after it publishes too.
  std::vector<std::uint32_t> fences_at_barrier;
};
thread_local Running running;
// The running block's launch, where it is checked; apart from Running: the hooks test it before anything
// else on every access the kernels make, checked or not, and a thread_local of a trivial type is read
// without the initialisation guard that Running's needs.
thread_local Launch* checked_launch = nullptr;

constexpr std::uintptr_t kWord = 4;
// Marks a record of one byte (user-space addresses leave the top bit clear).
constexpr std::uintptr_t kByteRecord = std::uintptr_t{1} << 63;

std::string dims_of(unsigned linear, dim3 extent) {
  char text[48];
  std::snprintf(text, sizeof text, "(%u,%u,%u)", linear % extent.x, linear / extent.x % extent.y,
                linear / (extent.x * extent.y));
  return text;
}

unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

std::uint32_t fences_of(const Running& r, unsigned thread) {
  return thread < r.fences.size() ? r.fences[thread] : 0;
}

// Reached only while the running block is checked (checked_launch is set).
[[gnu::noinline]] void on_access(const void* address, unsigned bytes, bool write) {
  Running& r = running;
  const unsigned thread = linear_thread();
  const Seen* seen = nullptr;
  if (!r.seen.empty()) {
    const auto it = r.seen.find(thread);
    if (it != r.seen.end()) seen = &it->second;
  }
  checked_launch->access(address, bytes, write, r.block, thread, r.phase,
                         thread < r.waited.size() && r.waited[thread], fences_of(r, thread), seen, r.last);
}

}  // namespace

namespace {

// The tables of launches that have ended, for the next ones (Launch::Table).
class TablePool {
 public:
  static TablePool& get() {
    static TablePool pool;
    return pool;
  }
  Launch::Table take() {
    Launch::Table table;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        table = std::move(free_.back());
        free_.pop_back();
      }
    }
    ++table.generation;  // from 1: the slots of a new table, of generation 0, are free
    return table;
  }
  void give_back(Launch::Table&& table) {
    if (table.words.empty()) return;
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(table));
  }

 private:
  std::mutex mutex_;
  std::vector<Launch::Table> free_;
};

}  // namespace

Launch::Launch(const LaunchSpec& spec, const operation_races::Place& place)
    : spec_(spec), allocations_(live_allocations()), table_(TablePool::get().take()) {
  if (place.own.lane != 0) operations_.emplace(place, spec.name, allocations_);
}

Launch::~Launch() {
  TablePool::get().give_back(std::move(table_));
}

Span Launch::span_of(std::uintptr_t address) const {
  auto it = std::upper_bound(
      allocations_.begin(), allocations_.end(), address,
      [](std::uintptr_t a, const Allocation& b) { return a < reinterpret_cast<std::uintptr_t>(b.base); });
  Span gap;
  gap.end = it == allocations_.end() ? ~std::uintptr_t{0} : reinterpret_cast<std::uintptr_t>(it->base);
  if (it == allocations_.begin()) return gap;
  --it;
  const auto base = reinterpret_cast<std::uintptr_t>(it->base);
  if (address - base < it->bytes) return {base, base + it->bytes, &*it};
  gap.begin = base + it->bytes;
  return gap;
}

void Launch::access(const void* address, unsigned bytes, bool write, unsigned block, unsigned thread,
                    std::uint64_t phase, bool waited, std::uint32_t fences, const Seen* seen, Span& last) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  if (at - last.begin >= last.end - last.begin) last = span_of(at);
  if (last.allocation == nullptr) return;
  // The record's own memory, allocated and freed by whichever emulated thread runs, is no access of theirs.
  const race::IgnoreAccesses own_memory;
  // Blocks of a cooperative launch or a programmatic chain run on OS threads of their own. A spin lock: a
  // mutex would be a synchronisation ThreadSanitizer sees, ordering the very blocks it is to check.
  while (busy_.test_and_set(std::memory_order_acquire))
    sched_yield();
  const Touch now{block, thread, static_cast<std::uint32_t>(phase), fences};
  const std::size_t allocation = static_cast<std::size_t>(last.allocation - allocations_.data());
  operation_races::Conflict conflict;
  const auto between_operations = [&](std::uintptr_t unit, bool byte) {
    if (operations_ && operations_->access(allocation, unit, byte, write, waited, conflict))
      report(unit, write, now, waited, conflict);
  };
  if (bytes >= kWord) {
    for (std::uintptr_t w = at / kWord * kWord; w < at + bytes; w += kWord) {
      word(w, write, now, seen);
      between_operations(w, false);
    }
  } else {
    // Byte by byte, in records of their own: blocks may write neighbouring bytes of one word (a label each).
    for (std::uintptr_t b = at; b < at + bytes; ++b) {
      word(b | kByteRecord, write, now, seen);
      between_operations(b, true);
    }
  }
  busy_.clear(std::memory_order_release);
}

Launch::Word& Launch::find(std::uintptr_t address) {
  std::vector<Word>& words = table_.words;
  const std::uint64_t generation = table_.generation;
  if (2 * (used_ + 1) > words.size()) {
    std::vector<Word> old(std::max<std::size_t>(1 << 16, 2 * words.size()));
    old.swap(words);
    used_ = 0;
    for (const Word& w : old)
      if (w.generation == generation) find(w.address) = w;
  }
  const std::size_t mask = words.size() - 1;
  // The 16 words of a 64-byte line of memory in 16 slots side by side, the lines spread over the table by
  // Fibonacci hashing: a thread's or a warp's neighbouring accesses find their records side by side too.
  const std::uintptr_t line = address >> 6;
  for (std::size_t i = ((line * 0x9e3779b97f4a7c15ull) >> 20 << 4) + ((address >> 2) & 15);; ++i) {
    Word& w = words[i & mask];
    if (w.generation != generation) {
      w = Word{};
      w.address = address;
      w.generation = generation;
      ++used_;
      return w;
    }
    if (w.address == address) return w;
  }
}

std::uint64_t Launch::launch_thread(const Touch& t) const {
  const dim3 b = spec_.block;
  return std::uint64_t{t.block} * (std::uint64_t{b.x} * b.y * b.z) + t.thread;
}

bool Launch::ordered(const Touch& then, const Seen* seen) const {
  if (seen == nullptr) return false;
  const auto it = seen->acquired.find(launch_thread(then));
  return it != seen->acquired.end() && it->second > then.fences;
}

std::uint64_t Launch::atomic_add(void* address, std::uint64_t value, unsigned bytes, unsigned block,
                                 unsigned thread, std::uint32_t fences,
                                 const std::vector<std::uint32_t>& fences_at_barrier, Seen& seen) {
  const race::IgnoreAccesses own_memory;
  while (busy_.test_and_set(std::memory_order_acquire))
    sched_yield();
  std::uint64_t old = 0;
  if (bytes == 4)
    old = __atomic_fetch_add(static_cast<std::uint32_t*>(address), static_cast<std::uint32_t>(value),
                             __ATOMIC_RELAXED);
  else
    old = __atomic_fetch_add(static_cast<std::uint64_t*>(address), value, __ATOMIC_RELAXED);
  auto& writers = published_[reinterpret_cast<std::uintptr_t>(address)];
  for (const auto& [writer, count] : writers) {
    std::uint32_t& known = seen.pending[writer];
    known = std::max(known, count);
  }
  const auto publish = [&](unsigned t, std::uint32_t count) {
    std::uint32_t& known = writers[launch_thread(Touch{block, t, 0, 0})];
    known = std::max(known, count);
  };
  publish(thread, fences);
  // A fence of another thread of the block, followed by a barrier this thread has passed since.
  for (unsigned t = 0; t < fences_at_barrier.size(); ++t)
    if (fences_at_barrier[t] > 0) publish(t, fences_at_barrier[t]);
  busy_.clear(std::memory_order_release);
  return old;
}

void Launch::word(std::uintptr_t address, bool write, const Touch& now, const Seen* seen) {
  Word& w = find(address);
  const bool read_now = w.reader.phase == now.phase;
  if (w.writer.phase == now.phase && w.writer.block != now.block && !ordered(w.writer, seen)) {
    report(address, write ? "writes" : "reads", now, "wrote", w.writer, seen);
  } else if (write && read_now && w.reader.block != now.block && !ordered(w.reader, seen)) {
    report(address, "writes", now, "read", w.reader, seen);
  } else if (write && read_now && w.other_reader.phase == now.phase && !ordered(w.other_reader, seen)) {
    report(address, "writes", now, "read", w.other_reader, seen);  // this block read it first, that one after
  }
  if (write) {
    w.writer = now;
  } else if (!read_now) {
    w.reader = now;
    w.other_reader = Touch{};
  } else if (w.reader.block != now.block && w.other_reader.phase != now.phase) {
    w.other_reader = now;
  }
}

std::string Launch::where(std::uintptr_t address) const {
  const Allocation* a = span_of(address).allocation;
  return "byte " + std::to_string(address - reinterpret_cast<std::uintptr_t>(a->base)) + " of a " +
         (a->device >= 0 ? "device allocation" : "pinned host allocation") + " of " +
         std::to_string(a->bytes) + " bytes";
}

void Launch::report(std::uintptr_t address, const char* now_does, const Touch& now, const char* then_did,
                    const Touch& then, const Seen* seen) {
  if (races_++ > 0) return;
  const std::string phase = spec_.cooperative ? " in the same interval between grid.sync() calls (" +
                                                    std::to_string(now.phase) + ")"
                                              : " in the same launch";
  first_race_ = "emulated CUDA: race between blocks in kernel " + std::string(spec_.name) + ": " +
                thread_name(now) + " " + now_does + " " + where(address & ~kByteRecord) + ", which " +
                thread_name(then) + " " + then_did + phase;
  // A flag between the two that falls short of ordering them: say which fence is missing.
  const std::uint64_t other = launch_thread(then);
  const auto known = [&](const std::unordered_map<std::uint64_t, std::uint32_t>& m) -> std::uint32_t {
    const auto it = seen ? m.find(other) : m.end();
    return seen && it != m.end() ? it->second : 0;
  };
  const bool heard = seen && (seen->pending.count(other) || seen->acquired.count(other));
  if (heard && known(seen->pending) > then.fences)
    first_race_ +=
        ": an atomic it read was written after a __threadfence() that followed that access, but "
        "no __threadfence() of its own comes between that read and this access";
  else if (heard)
    first_race_ +=
        ": an atomic it read was written by that thread with no __threadfence() between that "
        "access and the atomic write";
  else if (!published_.empty())
    first_race_ +=
        ": nothing orders two blocks of a launch (a flag set and read through atomics orders them "
        "only with a __threadfence() between the writes and the flag's atomic write, and another "
        "between its atomic read and the reads)";
  else
    first_race_ += ": nothing orders two blocks of a launch";
}

void Launch::report(std::uintptr_t address, bool write, const Touch& now, bool waited,
                    const operation_races::Conflict& then) {
  if (races_++ > 0) return;
  const operation_races::Place& place = operations_->place();
  const bool same_stream = then.operation.lane == place.own.lane;
  first_race_ = "emulated CUDA: race between operations in kernel " + std::string(spec_.name) + ": " +
                thread_name(now) + (write ? " writes " : " reads ") + where(address) + ", which " + then.by +
                " on " + operation_races::stream_name(then.operation, then.device) +
                (then.wrote ? " wrote" : " read") + ", and nothing orders that before this launch on " +
                operation_races::stream_name(place.own, place.device);
  if (!waited && same_stream && place.after_wait.covers(then.operation))
    first_race_ += ": the access comes before the thread's cudaGridDependencySynchronize()";
  else if (same_stream && then.operation.seq > place.own.seq)
    // A later kernel of the stream got there first: only a programmatic launch's overlap lets it.
    first_race_ +=
        ": that kernel, launched programmatically after this one, made its access before its thread's "
        "cudaGridDependencySynchronize(), and this one comes after the block's "
        "cudaTriggerProgrammaticLaunchCompletion()";
  else
    first_race_ += ": no stream order, event, collective or host synchronisation between them";
}

std::string Launch::thread_name(const Touch& t) const {
  return "block " + dims_of(t.block, spec_.grid) + " thread " + dims_of(t.thread, spec_.block);
}

void Launch::check() const {
  if (races_ == 0) return;
  throw Fault(
      cudaErrorLaunchFailure,
      first_race_ + (races_ > 1 ? " (and " + std::to_string(races_ - 1) + " more racing accesses)" : ""));
}

bool wanted() {
  return kEnabled && config().block_races;
}

void enter(Launch* launch, unsigned block) {
  checked_launch = launch;
  running.block = block;
  running.phase = 0;
  running.last = Span{};
  running.waited.clear();
  running.fences.clear();
  running.seen.clear();
  running.fences_at_barrier.clear();
}

void passed_programmatic_wait() {
  if (checked_launch == nullptr) return;
  Running& r = running;
  const race::IgnoreAccesses own_memory;
  const unsigned thread = linear_thread();
  if (thread >= r.waited.size()) r.waited.resize(thread + std::size_t{1}, false);
  r.waited[thread] = true;
}

void fence() {
  if (checked_launch == nullptr) return;
  Running& r = running;
  const race::IgnoreAccesses own_memory;
  const unsigned thread = linear_thread();
  if (thread >= r.fences.size()) r.fences.resize(thread + std::size_t{1}, 0);
  ++r.fences[thread];
  // What its atomic reads saw before this fence is ordered before what it does after.
  if (const auto it = r.seen.find(thread); it != r.seen.end()) {
    for (const auto& [writer, count] : it->second.pending) {
      std::uint32_t& acquired = it->second.acquired[writer];
      acquired = std::max(acquired, count);
    }
    it->second.pending.clear();
  }
}

void block_barrier() {
  if (checked_launch == nullptr) return;
  Running& r = running;
  const race::IgnoreAccesses own_memory;
  r.fences_at_barrier = r.fences;
  if (r.seen.empty()) return;
  // What any thread acquired before the barrier, every thread has after it.
  std::unordered_map<std::uint64_t, std::uint32_t> acquired;
  for (const auto& [thread, seen] : r.seen)
    for (const auto& [writer, count] : seen.acquired)
      acquired[writer] = std::max(acquired[writer], count);
  if (acquired.empty()) return;
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  for (unsigned t = 0; t < threads; ++t) {
    Seen& seen = r.seen[t];
    for (const auto& [writer, count] : acquired)
      seen.acquired[writer] = std::max(seen.acquired[writer], count);
  }
}

std::uint64_t atomic_add(void* address, std::uint64_t value, unsigned bytes) {
  if (checked_launch == nullptr) {
    if (bytes == 4)
      return __atomic_fetch_add(static_cast<std::uint32_t*>(address), static_cast<std::uint32_t>(value),
                                __ATOMIC_RELAXED);
    return __atomic_fetch_add(static_cast<std::uint64_t*>(address), value, __ATOMIC_RELAXED);
  }
  Running& r = running;
  const unsigned thread = linear_thread();
  Seen* seen = nullptr;
  {
    const race::IgnoreAccesses own_memory;
    seen = &r.seen[thread];
  }
  return checked_launch->atomic_add(address, value, bytes, r.block, thread, fences_of(r, thread),
                                    r.fences_at_barrier, *seen);
}

void set_phase(std::uint64_t phase) {
  running.phase = phase;
}

void leave() {
  checked_launch = nullptr;
  running.waited.clear();
  running.fences.clear();
  running.seen.clear();
  running.fences_at_barrier.clear();
}

}  // namespace mnistdp::emu::block_races

namespace mnistdp::emu {

// The dialect's atomicAdd and __threadfence() (dialect.hpp). The atomic's address is checked as the kernels'
// own accesses are: the instrumentation that checks those does not reach into the emulator.
std::uint64_t atomic_add(void* address, std::uint64_t value, unsigned bytes) {
  device_addresses::on_access(address, bytes, true);
  const device_addresses::EmulatorCode emulator;
  return block_races::atomic_add(address, value, bytes);
}

void thread_fence() {
  const device_addresses::EmulatorCode emulator;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  block_races::fence();
}

}  // namespace mnistdp::emu

// SanitizerCoverage's callbacks, called before every load and store of 1 to 16 bytes in the code compiled
// with -fsanitize-coverage=trace-loads,trace-stores (the kernels, in preset emu-asan; vectorising is off
// there, so that no access is wider). In a launch the check of races between blocks watches, each access goes
// to the check of addresses (device_addresses.hpp), then to the race check; in any other, the callback
// returns after one load and one test. Preset emu checks every launch's addresses through its shadow
// (device_shadow.hpp), and AddressSanitizer here reports an access to poisoned device memory by itself: a
// call into the check before every access of every kernel took half of this preset's time. C linkage
// ignores the pointee's type, which the compiler gives as an integer of the access's size. The race check is
// the emulator's code: library code it shares with the kernels may be the kernels' instrumented copy, whose
// accesses are not the kernel's (device_addresses::EmulatorCode).
#define MNISTDP_EMU_ACCESS_HOOKS(bytes)                                              \
  extern "C" void __sanitizer_cov_load##bytes(const void* p) {                       \
    if (__builtin_expect(mnistdp::emu::block_races::checked_launch != nullptr, 0)) { \
      mnistdp::emu::device_addresses::on_access(p, bytes, false);                    \
      const mnistdp::emu::device_addresses::EmulatorCode emulator;                   \
      mnistdp::emu::block_races::on_access(p, bytes, false);                         \
    }                                                                                \
  }                                                                                  \
  extern "C" void __sanitizer_cov_store##bytes(const void* p) {                      \
    if (__builtin_expect(mnistdp::emu::block_races::checked_launch != nullptr, 0)) { \
      mnistdp::emu::device_addresses::on_access(p, bytes, true);                     \
      const mnistdp::emu::device_addresses::EmulatorCode emulator;                   \
      mnistdp::emu::block_races::on_access(p, bytes, true);                          \
    }                                                                                \
  }
MNISTDP_EMU_ACCESS_HOOKS(1)
MNISTDP_EMU_ACCESS_HOOKS(2)
MNISTDP_EMU_ACCESS_HOOKS(4)
MNISTDP_EMU_ACCESS_HOOKS(8)
MNISTDP_EMU_ACCESS_HOOKS(16)
