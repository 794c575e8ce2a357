#include "emu/src/device/block.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "emu/builtins.hpp"
#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"

namespace mnistdp::emu {

bool GridBarrier::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  if (aborted_) return false;
  const std::uint64_t generation = generation_;
  if (++arrived_ == blocks_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return true;
  }
  changed_.wait(lock, [&] { return generation_ != generation || aborted_; });
  return !aborted_ || generation_ != generation;
}

void GridBarrier::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

namespace {

namespace ctx = boost::context;

// Fiber stacks, reused across blocks and launches: mapping a stack per thread per launch would cost more
// than most kernels. Each has a guard page below it, so that an overflow faults instead of corrupting. They
// are mapped a slab at a time: a chain of programmatic launches holds thousands at once, and ThreadSanitizer
// maps shadow for every mapping, which with one mapping a stack ran into the kernel's limit on mappings.
// A guard page splits its slab's mapping, two mappings a stack, so past a quarter of that limit
// (vm.max_map_count) slabs have one guard page below them and a canary at the bottom of each stack, checked
// when the stack comes back: a cooperative grid as large as an H200 keeps resident (the persistent kernel's
// 528 blocks of 256 threads on 132 SMs, every thread waiting at grid.sync() at once) needs that many stacks.
class StackPool {
 public:
  static StackPool& get() {
    static StackPool pool;
    return pool;
  }
  ctx::stack_context take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        ctx::stack_context s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const bool guarded = mapped_.fetch_add(kSlab) < guarded_stacks();
    const std::size_t stride = guarded ? kStackBytes + page : kStackBytes;
    void* p = mmap(nullptr, stride * kSlab + (guarded ? 0 : page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (!guarded) mprotect(p, page, PROT_NONE);
    checks::memory_owned(p, stride * kSlab + (guarded ? 0 : page));  // every thread's own memory
    std::vector<ctx::stack_context> slab(kSlab);
    for (std::size_t i = 0; i < kSlab; ++i) {
      char* base = static_cast<char*>(p) + (guarded ? 0 : page) + i * stride;
      if (guarded) mprotect(base, page, PROT_NONE);
      slab[i].size = kStackBytes;
      slab[i].sp = base + stride;
      std::memset(bottom(slab[i]), kCanary, kCanaryBytes);
    }
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), slab.begin() + 1, slab.end());
    return slab.front();
  }
  void give_back(ctx::stack_context s) {
    const unsigned char* b = bottom(s);
    if (std::any_of(b, b + kCanaryBytes, [](unsigned char c) { return c != kCanary; })) {
      std::fprintf(stderr, "emulated CUDA: an emulated thread overflowed its %zu-byte stack\n", kStackBytes);
      std::abort();
    }
    std::lock_guard lock(mutex_);
    free_.push_back(s);
  }

 private:
  static constexpr unsigned char kCanary = 0xA5;
  static constexpr std::size_t kCanaryBytes = 64;
  static unsigned char* bottom(const ctx::stack_context& s) {
    return static_cast<unsigned char*>(s.sp) - s.size;
  }
  // The stacks that may have a guard page each: a quarter of the kernel's limit on mappings.
  static std::size_t guarded_stacks() {
    static const std::size_t stacks = [] {
      std::size_t limit = 65530;  // the kernel's default
      if (std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
        unsigned long value = 0;
        if (std::fscanf(f, "%lu", &value) == 1) limit = value;
        std::fclose(f);
      }
      return limit / 4;
    }();
    return stacks;
  }
  std::atomic<std::size_t> mapped_{0};
  static constexpr std::size_t kStackBytes = checks::kThreadStackBytes;
  static constexpr std::size_t kSlab = 64;
  std::mutex mutex_;
  std::vector<ctx::stack_context> free_;
};

struct PooledStack {
  ctx::stack_context allocate() { return StackPool::get().take(); }
  void deallocate(ctx::stack_context& s) noexcept { StackPool::get().give_back(s); }
};

checks::StackBounds bounds_of(const ctx::stack_context& s) {
  return {static_cast<const char*>(s.sp) - s.size, s.size};
}

// The adversarial order's generator: a splitmix64 stream, cheap enough to shuffle every barrier's threads.
class SplitMix {
 public:
  using result_type = std::uint64_t;
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    state_ += 0x9e3779b97f4a7c15ull;
    return mix(state_, 0);
  }

 private:
  std::uint64_t state_;
};

enum class Wait { none, barrier, shuffle, grid, previous_kernel };

// A block's shared memory, exactly its size, which its kernel may touch while it lives.
struct SharedDelete {
  std::size_t alignment;
  std::size_t bytes;
  void operator()(std::byte* p) const noexcept {
    checks::memory_disowned(p, bytes);
    ::operator delete (p, std::align_val_t{alignment});
  }
};
using SharedBytes = std::unique_ptr<std::byte, SharedDelete>;
SharedBytes shared_bytes(std::size_t bytes, std::size_t alignment) {
  SharedBytes shared(static_cast<std::byte*>(::operator new (bytes, std::align_val_t{alignment})),
                     SharedDelete{alignment, bytes});
  checks::memory_owned(shared.get(), bytes);
  return shared;
}
struct SharedVariable {
  const void* tag = nullptr;
  SharedBytes data{nullptr, SharedDelete{16, 0}};
  std::size_t bytes = 0;
};

// Where a thread is: what the built-in variables hold while it runs.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

void enter(const ThreadContext& c) {
  threadIdx = c.thread_idx;
  blockIdx = c.block_idx;
  blockDim = c.block_dim;
  gridDim = c.grid_dim;
}

struct Thread {
  ThreadContext context{};
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::none;
  ctx::fiber suspended;       // the fiber holding this thread while it waits
  checks::StackBounds stack;  // that fiber's stack
};

// Thrown out of a waiting thread's suspend() when its block is abandoned after a fault: it unwinds the
// thread's frames on its own stack, through the same switches as every other.
struct Unwind {};

struct NamedBarrier {
  std::vector<int> waiting;
  int expected = 0;
  std::uint64_t phase = 0;  // times it has released its threads
};

struct WarpCollective {
  const char* what = "__shfl_xor_sync";  // or "__syncwarp"
  unsigned mask = 0;
  unsigned arrived = 0;
  unsigned reads = 0;
  std::uint64_t values[32] = {};
  std::uint64_t generation = 0;
};

struct Warp {
  unsigned present = 0;  // the lanes the block has
  unsigned exited = 0;   // the lanes that have returned
  std::uint64_t lane_generation[32] = {};
  WarpCollective collective[2];  // by generation parity: a lane may start the next while others read
};

std::string dims(uint3 v) {
  char text[48];
  std::snprintf(text, sizeof text, "(%u,%u,%u)", v.x, v.y, v.z);
  return text;
}

class Block;
thread_local Block* tls_block = nullptr;

class Block {
 public:
  // Readies the block for block `index` of a launch; the storage of the block before is reused (a kernel of
  // small blocks runs hundreds of them).
  void start(const LaunchSpec& spec, const std::function<void()>& body, uint3 index, GridBarrier* grid,
             std::uint64_t seed, ProgrammaticLink* link, checks::LaunchChecks launch_checks) {
    // The block's storage, which the last block's threads used, is the emulator's: the race checks do not
    // see its reuse.
    const checks::BlockStorage storage;
    grid_phase_ = 0;
    link_ = link;
    block_triggered_ = false;
    previous_waiting_ = 0;
    previous_complete_ = link == nullptr || !link->has_previous();
    spec_ = &spec;
    body_ = &body;
    index_ = index;
    grid_ = grid;
    rng_ = SplitMix(seed);
    const dim3 b = spec.block;
    count_ = static_cast<int>(b.x * b.y * b.z);
    threads_.resize(static_cast<std::size_t>(count_));
    for (int i = 0; i < count_; ++i) {
      Thread& t = threads_[static_cast<std::size_t>(i)];
      const auto u = static_cast<unsigned>(i);
      t.linear = u;
      t.context.thread_idx = {u % b.x, u / b.x % b.y, u / (b.x * b.y)};
      t.context.block_idx = index;
      t.context.block_dim = spec.block;
      t.context.grid_dim = spec.grid;
      t.done = false;
      t.wait = Wait::none;
    }
    warps_.assign(static_cast<std::size_t>((count_ + 31) / 32), Warp{});
    for (std::size_t w = 0; w < warps_.size(); ++w) {
      const int lanes = std::min(32, count_ - static_cast<int>(w) * 32);
      warps_[w].present = lanes == 32 ? ~0u : (1u << lanes) - 1u;
    }
    start_order_.resize(static_cast<std::size_t>(count_));
    for (int i = 0; i < count_; ++i)
      start_order_[static_cast<std::size_t>(i)] = i;
    shuffle(start_order_);
    if (spec.shared_bytes > 0) {
      // Exactly the launch's bytes, 16-byte aligned as on a GPU, so that AddressSanitizer sees a read past
      // them.
      dynamic_shared_ = shared_bytes(spec.shared_bytes, 16);
      std::memset(dynamic_shared_.get(), 0xFF, spec.shared_bytes);  // NaN: a read nobody wrote shows
    } else {
      dynamic_shared_.reset();
    }
    next_start_ = 0;
    current_ = -1;
    done_ = 0;
    grid_waiting_ = 0;
    runnable_.clear();
    for (NamedBarrier& nb : barriers_) {
      nb.waiting.clear();
      nb.expected = 0;
      nb.phase = 0;
    }
    events_.block_starts(launch_checks, count_, barriers_.size(), warps_.size());
    fault_.clear();
    misaligned_.clear();
    from_ = kScheduler;
    shared_variables_.clear();
  }

  void* shared_variable(const void* tag, std::size_t bytes, std::size_t alignment) {
    for (const SharedVariable& v : shared_variables_)
      if (v.tag == tag) return v.data.get();
    const InEmulator bookkeeping(*this);
    const checks::BlockStorage storage;
    const std::size_t align = std::max<std::size_t>(alignment, 16);
    SharedVariable v;
    v.tag = tag;
    v.bytes = bytes;
    v.data = shared_bytes(bytes, align);
    std::memset(v.data.get(), 0xFF, bytes);  // NaN: a read nobody wrote shows
    shared_variables_.push_back(std::move(v));
    return shared_variables_.back().data.get();
  }

  // At the block's end, after run() or abandon(): its shared memory and the race checks' identities of its
  // threads go (the memory unseen by the race checks, as in start(): the OS thread's own identity frees what
  // the emulated threads used).
  void finish() {
    const checks::BlockStorage storage;
    shared_variables_.clear();
    dynamic_shared_.reset();
    events_.block_ends();
  }

  // After a fault: each thread still suspended is resumed once, to unwind its frames and end its fiber.
  void abandon() {
    tls_block = this;
    unwinding_ = true;
    for (Thread& t : threads_) {
      if (t.suspended) arrived(jump({std::move(t.suspended), t.stack}, kScheduler));
    }
    unwinding_ = false;
    tls_block = nullptr;
  }

  // A GPU stops the kernel at its first illegal or misaligned address; here the block stops at its next
  // switch, or its end, with the first one recorded.
  void stop_at_recorded_access() {
    if (events_.illegal_address()) throw Fault(cudaErrorIllegalAddress, events_.illegal_address_message());
    if (!misaligned_.empty()) throw Fault(cudaErrorMisalignedAddress, misaligned_);
  }

  void run() {
    tls_block = this;
    const dim3 g = spec_->grid;
    events_.block_runs(*spec_, index_.x + g.x * (index_.y + g.y * index_.z));
    struct Reset {
      checks::BlockEvents& events;
      ~Reset() {
        tls_block = nullptr;
        events.block_stops();
      }
    } reset{events_};
    while (true) {
      stop_at_recorded_access();
      if (!fault_.empty()) throw Fault(cudaErrorLaunchFailure, fault_);
      if (!runnable_.empty() || next_start_ < count_) {
        arrived(jump(take_next(), kScheduler));
      } else if (done_ == count_) {
        stop_at_recorded_access();
        return;
      } else if (grid_waiting_ == count_ - done_ && grid_waiting_ > 0) {
        if (done_ > 0) fail_at(-1, "threads exited while others wait at grid.sync()");
        if (!grid_->arrive_and_wait())
          throw Fault(cudaErrorLaunchFailure, "aborted: another block of the grid failed");
        std::vector<int> waiting;
        for (Thread& t : threads_)
          if (t.wait == Wait::grid) waiting.push_back(static_cast<int>(t.linear));
        grid_waiting_ = 0;
        checks::BlockEvents::grid_phase_begins(++grid_phase_);
        release(waiting);
      } else if (previous_waiting_ > 0) {
        // Nothing can run before the kernel before has completed.
        if (!link_->wait_for_previous())
          throw Fault(cudaErrorLaunchFailure, "aborted: another block of the programmatic chain failed");
        previous_complete_ = true;
        release_waiting(Wait::previous_kernel);
        previous_waiting_ = 0;
      } else {
        fail_at(-1, "deadlock: " + describe_waits());
      }
    }
  }

  // ---- the builtins, called by the running thread -------------------------------------------------------

  void barrier(int id, int expected, const char* what) {
    const checks::SyncPoint* point = nullptr;
    if (id >= 0 && id < static_cast<int>(barriers_.size())) {
      point = events_.barrier_point(id, barriers_[static_cast<std::size_t>(id)].phase);
      checks::BlockEvents::arrives(point);
    }
    {
      const InEmulator bookkeeping(*this);
      wait_at_barrier(id, expected, what);
    }
    checks::BlockEvents::leaves(point);
  }

  void wait_at_barrier(int id, int expected, const char* what) {
    Thread& t = running();
    if (id == 0) expected = count_;
    if (expected <= 0 || expected > count_ || (id != 0 && expected % 32 != 0))
      fail_at(current_, std::string(what) + " with a thread count of " + std::to_string(expected));
    NamedBarrier& b = barriers_[static_cast<std::size_t>(id)];
    if (b.waiting.empty()) {
      b.expected = expected;
    } else if (b.expected != expected) {
      fail_at(current_, std::string(what) + " reached with " + std::to_string(expected) +
                            " threads where others gave " + std::to_string(b.expected));
    }
    if (id == 0 && done_ > 0)
      fail_at(current_, "reached __syncthreads() after " + std::to_string(done_) +
                            " threads of the block exited: every thread must reach it");
    t.wait = Wait::barrier;
    b.waiting.push_back(current_);
    if (static_cast<int>(b.waiting.size()) == b.expected) {
      if (id == 0) checks::BlockEvents::block_barrier_released();
      ++b.phase;
      release(b.waiting);
      b.waiting.clear();
    }
    suspend();
  }

  std::uint64_t shuffle_xor(unsigned mask, std::uint64_t value, int lane_mask, int width) {
    return in_warp("__shfl_xor_sync", mask, value, lane_mask, width, /*orders_memory=*/false);
  }

  // __syncwarp(mask): the lanes the mask names wait for each other, and what each wrote before is seen by
  // the others after (the CUDA programming guide: "__syncwarp() ... guarantees memory ordering among threads
  // participating in the barrier"). A collective that exchanges nothing, checked as a shuffle is.
  void sync_warp(unsigned mask) { in_warp("__syncwarp", mask, 0, 0, 32, /*orders_memory=*/true); }

  // A warp collective, `what`: a shuffle's exchange, or the barrier alone. Only __syncwarp orders memory:
  // a shuffle exchanges registers, and the programming guide promises memory ordering for __syncwarp()
  // alone, so the race checks see a shuffle as no synchronisation (a lane that reads another's shared slot
  // with only a shuffle between is reported). The lanes still all arrive before any leaves, as they must to
  // exchange their values; what the shuffle cannot order here is shown under ThreadSanitizer only.
  std::uint64_t in_warp(const char* what, unsigned mask, std::uint64_t value, int lane_mask, int width,
                        bool orders_memory) {
    const int self = current_;
    const Warp& w = warps_[static_cast<std::size_t>(self / 32)];
    const checks::SyncPoint* point =
        orders_memory ? events_.warp_point(self / 32, w.lane_generation[self % 32]) : nullptr;
    checks::BlockEvents::arrives(point);
    std::uint64_t out = 0;
    {
      const InEmulator bookkeeping(*this);
      out = exchange_in_warp(what, mask, value, lane_mask, width);
    }
    checks::BlockEvents::leaves(point);
    return out;
  }

  std::uint64_t exchange_in_warp(const char* what, unsigned mask, std::uint64_t value, int lane_mask,
                                 int width) {
    const int self = current_;
    const int lane = self % 32;
    Warp& w = warps_[static_cast<std::size_t>(self / 32)];
    const std::string call = what;
    if (width != 32) fail_at(self, call + " with a width other than 32 is not emulated");
    if (((mask >> lane) & 1u) == 0)
      fail_at(self, call + " with mask " + hex(mask) + ", which does not name the calling lane " +
                        std::to_string(lane));
    const int warp_base = self - lane;
    if (const unsigned missing = mask & ~w.present; missing != 0)
      fail_at(self, call + " with mask " + hex(mask) + ", which names lane " +
                        std::to_string(std::countr_zero(missing)) + " of a warp that has no such thread");
    if (const unsigned gone = mask & w.exited; gone != 0)
      fail_at(self, call + " with mask " + hex(mask) + ", but lane " +
                        std::to_string(std::countr_zero(gone)) + " has exited: it will never arrive");
    const std::uint64_t generation = w.lane_generation[lane]++;
    WarpCollective& c = w.collective[generation % 2];
    if (c.arrived == 0) {
      c.what = what;
      c.mask = mask;
      c.generation = generation;
    } else if (c.mask != mask || c.generation != generation || call != c.what) {
      fail_at(self, "lanes of one warp reached different collectives (" + std::string(c.what) +
                        " with mask " + hex(c.mask) + " and " + call + " with mask " + hex(mask) +
                        "): every lane a mask names must make the same call");
    }
    c.values[lane] = value;
    c.arrived |= 1u << lane;
    threads_[static_cast<std::size_t>(self)].wait = Wait::shuffle;
    if ((c.arrived & mask) == mask) {
      lanes_.clear();
      for (int l = 0; l < 32; ++l)
        if ((mask >> l) & 1u) lanes_.push_back(warp_base + l);
      release(lanes_);
    }
    suspend();
    const int source = lane ^ lane_mask;
    if (source > 31 || ((mask >> source) & 1u) == 0)
      fail_at(self, call + " reads lane " + std::to_string(source) + ", which the mask " + hex(mask) +
                        " does not name");
    const std::uint64_t out = c.values[source];
    if (++c.reads == static_cast<unsigned>(std::popcount(mask))) {
      c.arrived = 0;
      c.reads = 0;
    }
    return out;
  }

  void grid_sync() {
    const checks::SyncPoint* point = grid_ ? &grid_->token(grid_phase_) : nullptr;
    checks::BlockEvents::arrives(point);
    {
      const InEmulator bookkeeping(*this);
      if (!grid_) fail_at(current_, "grid.sync() in a kernel not launched cooperatively");
      running().wait = Wait::grid;
      ++grid_waiting_;
      suspend();
    }
    checks::BlockEvents::leaves(point);
  }

  void* dynamic_shared() { return dynamic_shared_.get(); }

  bool shared_memory_holding(std::uintptr_t address, std::uintptr_t* begin, std::size_t* bytes) const {
    const auto holds = [&](const std::byte* p, std::size_t n) {
      const auto b = reinterpret_cast<std::uintptr_t>(p);
      if (p == nullptr || address - b >= n) return false;
      *begin = b;
      *bytes = n;
      return true;
    };
    if (holds(dynamic_shared_.get(), spec_->shared_bytes)) return true;
    for (const SharedVariable& v : shared_variables_)
      if (holds(v.data.get(), v.bytes)) return true;
    return false;
  }

  // cudaGridDependencySynchronize(): at once where the kernel before has completed (always, outside a chain
  // of programmatic launches); otherwise the thread waits until the block can do nothing else.
  void programmatic_wait() {
    if (!previous_complete_) {
      const InEmulator bookkeeping(*this);
      running().wait = Wait::previous_kernel;
      ++previous_waiting_;
      suspend();
    }
    // The kernel before has completed: what its threads did happens before what this thread does next.
    checks::BlockEvents::programmatic_wait_passed(link_ ? link_->previous_end() : nullptr);
  }

  // cudaTriggerProgrammaticLaunchCompletion(). The block triggers at the first call of any of its threads
  // (PTX's griddepcontrol.launch_dependents: "Repeated invocations of this instruction by threads in the
  // current CTA will have no additional side effects past that of the first invocation"), whatever its other
  // threads have still to do. In a chain of programmatic launches the whole block is then held there (this
  // OS thread blocks, in the calling thread) while the next kernel runs up to its wait: what any of its
  // threads does after the first call comes after the next kernel's work before its wait.
  void programmatic_trigger() {
    if (!link_ || !link_->has_next() || block_triggered_) return;
    const InEmulator bookkeeping(*this);
    block_triggered_ = true;
    if (!link_->block_triggered())
      fail_at(current_, "aborted: another block of the programmatic chain failed");
  }

  // "emulated CUDA: kernel K, block (x,y,z)[, thread (x,y,z)]"; the thread when one is given (>= 0).
  std::string where(int thread) const {
    std::string out = "emulated CUDA: kernel " + std::string(spec_->name) + ", block " + dims(index_);
    if (thread >= 0) out += ", thread " + dims(threads_[static_cast<std::size_t>(thread)].context.thread_idx);
    return out;
  }

  int running_thread() const { return current_; }

  // "K block (x,y,z) thread (x,y,z)", K the kernel's name without its namespaces and leading '&': the race
  // checks' name of an emulated thread, which ThreadSanitizer's reports cut at 64 characters.
  std::string short_where(int thread) const {
    std::string_view name = spec_->name;
    if (!name.empty() && name.front() == '&') name.remove_prefix(1);
    const std::size_t open = name.find('<');
    const std::size_t colons = name.substr(0, open).rfind("::");
    if (colons != std::string_view::npos) name.remove_prefix(colons + 2);
    return std::string(name) + " block " + dims(index_) + " thread " +
           dims(threads_[static_cast<std::size_t>(thread)].context.thread_idx);
  }

 private:
  // Control passes between the kernel's code of the running thread and the emulator's: the checks'
  // identities follow it (checks/block_events.hpp).
  void to_thread(int t) { events_.to_thread(t); }
  void to_home() { events_.to_home(); }
  class InEmulator {
   public:
    explicit InEmulator(Block& block) : block_(block), self_(block.current_) { block_.to_home(); }
    ~InEmulator() { block_.to_thread(self_); }  // on a throw too: the kernel's frames unwind as the thread
    InEmulator(const InEmulator&) = delete;
    InEmulator& operator=(const InEmulator&) = delete;

   private:
    Block& block_;
    int self_;
  };

  static std::string hex(unsigned v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", v);
    return text;
  }

  Thread& running() { return threads_[static_cast<std::size_t>(current_)]; }

  template <typename T>
  void shuffle(std::vector<T>& v) {
    if (config().order == Order::in_order) return;
    std::shuffle(v.begin(), v.end(), rng_);
  }

  void release(std::vector<int>& threads) {
    shuffle(threads);
    for (int t : threads) {
      threads_[static_cast<std::size_t>(t)].wait = Wait::none;
      runnable_.push_back(t);
    }
  }

  [[noreturn]] void fail_at(int thread, const std::string& what) {
    fault_ = where(thread) + ": " + what;
    if (grid_) grid_->abort();
    throw Fault(cudaErrorLaunchFailure, fault_);
  }

 public:
  // The running thread's access at `address` is not aligned to its type's `alignment`. The first such access
  // of the block is recorded, and the block ends at its next switch with cudaErrorMisalignedAddress, sticky,
  // as a GPU ends the kernel; the access itself goes ahead (the check runs inside the kernel's code, which it
  // must not unwind).
  void misaligned(std::uintptr_t address, unsigned alignment, const char* type) {
    if (!misaligned_.empty()) return;
    char text[200];
    std::snprintf(
        text, sizeof text,
        ": misaligned address: an access of %s at 0x%llx, which needs %u-byte alignment (it is %llu "
        "mod %u)",
        type, static_cast<unsigned long long>(address), alignment,
        static_cast<unsigned long long>(address % alignment), alignment);
    misaligned_ = where(current_) + text;
  }

 private:
  std::string describe_waits() const {
    std::string out;
    for (std::size_t id = 0; id < barriers_.size(); ++id) {
      const NamedBarrier& b = barriers_[id];
      if (b.waiting.empty()) continue;
      out += std::to_string(b.waiting.size()) + " of " + std::to_string(b.expected) + " threads wait at " +
             (id == 0 ? std::string("__syncthreads()") : "named barrier " + std::to_string(id)) + "; ";
    }
    for (std::size_t w = 0; w < warps_.size(); ++w) {
      for (const WarpCollective& c : warps_[w].collective) {
        if (c.arrived == 0) continue;
        out += "warp " + std::to_string(w) + ": lanes " + hex(c.arrived) + " wait at " + c.what +
               " for lanes " + hex(c.mask & ~c.arrived) + "; ";
      }
    }
    out += std::to_string(done_) + " threads exited";
    return out;
  }

  // Switching. Control passes directly from the thread that waits to the next one to run (a released thread,
  // or a new fiber for a thread not yet started), and to the scheduler only when there is neither. Every
  // switch hands the target the continuation of the context that left, which arrived() files under that
  // context: the waiting thread's, or the scheduler's.
  static constexpr int kScheduler = -1;

  struct Next {
    ctx::fiber fiber;
    checks::StackBounds stack;
  };

  ctx::fiber jump(Next&& target, int from) {
    from_ = from;
    void* fake_stack = nullptr;
    checks::stack_switching(&fake_stack, target.stack);
    ctx::fiber left = std::move(target.fiber).resume();
    landed(fake_stack);
    return left;
  }

  // First thing after a switch, on the stack switched to.
  void landed(void* fake_stack) {
    const checks::StackBounds left = checks::stack_switched(fake_stack);
    if (from_ == kScheduler) scheduler_stack_ = left;
  }

  void arrived(ctx::fiber&& left) {
    if (!left) return;  // the context that left had finished
    if (from_ == kScheduler)
      scheduler_ = std::move(left);
    else
      threads_[static_cast<std::size_t>(from_)].suspended = std::move(left);
  }

  // What runs next: a released thread (made current here), a new fiber for the threads not yet started, or,
  // with neither or after a fault, the scheduler.
  Next take_next() {
    const bool going_on = fault_.empty() && !unwinding_;
    if (going_on && !runnable_.empty()) {
      const int t = runnable_.front();
      runnable_.pop_front();
      current_ = t;
      Thread& th = threads_[static_cast<std::size_t>(t)];
      enter(th.context);
      checks::BlockEvents::thread_resumes(th.stack);
      return {std::move(th.suspended), th.stack};
    }
    if (going_on && next_start_ < count_) return new_fiber();
    return {std::move(scheduler_), scheduler_stack_};
  }

  // The running thread waits until it is released.
  void suspend() {
    const int self = current_;
    // The last to arrive releases itself too: when it is first in line, it simply goes on.
    if (fault_.empty() && !runnable_.empty() && runnable_.front() == self) {
      runnable_.pop_front();
      return;
    }
    arrived(jump(take_next(), self));
    // Resumed by whoever released it, which made it current; or by abandon(), to unwind.
    if (unwinding_) throw Unwind{};
  }

  // A fiber that starts threads, one after another, until one of them waits or none is left to start.
  Next new_fiber() {
    const ctx::stack_context stack = StackPool::get().take();
    const checks::StackBounds bounds = bounds_of(stack);
    ctx::fiber fiber(std::allocator_arg, ctx::preallocated(stack.sp, stack.size, stack), PooledStack{},
                     [this, bounds](ctx::fiber&& left) {
                       landed(nullptr);
                       arrived(std::move(left));
                       try {
                         while (next_start_ < count_ && fault_.empty()) {
                           const int t = start_order_[static_cast<std::size_t>(next_start_++)];
                           Thread& th = threads_[static_cast<std::size_t>(t)];
                           th.stack = bounds;
                           current_ = t;
                           enter(th.context);
                           checks::BlockEvents::thread_resumes(bounds);
                           events_.thread_starts(t, [&] { return short_where(t); });
                           (*body_)();
                           events_.thread_exits();
                           exit_thread(t);
                         }
                       } catch (const Unwind&) {
                         // abandon() is unwinding this thread; the fault is already recorded.
                         to_home();
                       } catch (const Fault&) {
                         // fault_ holds the message; the scheduler throws it.
                         to_home();
                       } catch (const std::exception& e) {
                         to_home();
                         fault_ = "emulated CUDA: kernel " + std::string(spec_->name) + ", block " +
                                  dims(index_) + ": a thread's code threw: " + e.what();
                       }
                       from_ = kFinished;
                       Next next = take_next();
                       checks::stack_switching(nullptr, next.stack);  // this fiber ends
                       return std::move(next.fiber);
                     });
    return {std::move(fiber), bounds};
  }

  static constexpr int kFinished = -2;

  void release_waiting(Wait what) {
    std::vector<int> waiting;
    for (Thread& t : threads_)
      if (t.wait == what) waiting.push_back(static_cast<int>(t.linear));
    release(waiting);
  }

  void exit_thread(int t) {
    Thread& th = threads_[static_cast<std::size_t>(t)];
    th.done = true;
    ++done_;
    if (!barriers_[0].waiting.empty())
      fail_at(t, "exited while " + std::to_string(barriers_[0].waiting.size()) +
                     " threads of its block wait at __syncthreads(): every thread must reach it");
    const int lane = t % 32;
    warps_[static_cast<std::size_t>(t / 32)].exited |= 1u << lane;
    for (const WarpCollective& c : warps_[static_cast<std::size_t>(t / 32)].collective) {
      if (c.arrived != 0 && ((c.mask >> lane) & 1u) && !((c.arrived >> lane) & 1u))
        fail_at(t, "exited while lanes " + hex(c.arrived) + " of its warp wait for it at " + c.what);
    }
    if (grid_waiting_ > 0) fail_at(t, "exited while threads of its block wait at grid.sync()");
  }

  checks::BlockEvents events_;    // the checks, told of the block's events
  std::uint64_t grid_phase_ = 0;  // grid.sync() calls completed
  const LaunchSpec* spec_ = nullptr;
  const std::function<void()>* body_ = nullptr;
  uint3 index_{};
  GridBarrier* grid_ = nullptr;
  ProgrammaticLink* link_ = nullptr;
  bool block_triggered_ = false;   // a thread has called cudaTriggerProgrammaticLaunchCompletion()
  int previous_waiting_ = 0;       // threads in cudaGridDependencySynchronize()
  bool previous_complete_ = true;  // the kernel before has completed: the wait returns at once
  SplitMix rng_{0};
  int count_ = 0;
  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  std::vector<int> start_order_;
  int next_start_ = 0;
  int current_ = -1;
  int done_ = 0;
  int grid_waiting_ = 0;
  std::deque<int> runnable_;
  std::vector<int> lanes_;                 // scratch: the lanes a collective releases
  ctx::fiber scheduler_;                   // the scheduler's continuation while a thread runs
  checks::StackBounds scheduler_stack_;    // the OS thread's own stack, where the scheduler runs
  bool unwinding_ = false;                 // abandon() is unwinding the suspended threads
  int from_ = kScheduler;                  // the context that made the last switch
  std::array<NamedBarrier, 16> barriers_;  // 0 is __syncthreads(); bar.sync takes ids 0 to 15
  SharedBytes dynamic_shared_{nullptr, SharedDelete{16, 0}};
  std::vector<SharedVariable> shared_variables_;
  std::string fault_;
  std::string misaligned_;  // the block's first misaligned access (misaligned()), or empty
};

Block& block_of_caller(const char* builtin) {
  if (!tls_block) throw std::logic_error(std::string(builtin) + " called outside an emulated kernel");
  return *tls_block;
}

}  // namespace

// After a sanitizer's report: which emulated thread made the access it reports.
void name_the_reporting_thread() {
  if (tls_block)
    std::fprintf(stderr, "%s: the sanitizer's report above was made by this emulated thread\n",
                 tls_block->where(tls_block->running_thread()).c_str());
}

void run_block(const LaunchSpec& spec, const std::function<void()>& body, uint3 index, GridBarrier* grid,
               std::uint64_t seed, ProgrammaticLink* link, checks::LaunchChecks launch_checks) {
  static const bool reports_named = (checks::on_report(name_the_reporting_thread), true);
  static_cast<void>(reports_named);
  thread_local Block block;
  block.start(spec, body, index, grid, seed, link, launch_checks);
  try {
    block.run();
  } catch (...) {
    block.abandon();
    block.finish();
    throw;
  }
  block.finish();
}

bool misaligned_access(std::uintptr_t address, unsigned alignment, const char* type) {
  if (!tls_block) return false;
  const checks::InBuiltin builtin;
  tls_block->misaligned(address, alignment, type);
  return true;
}

void sync_threads() {
  const checks::InBuiltin builtin;
  block_of_caller("__syncthreads()").barrier(0, 0, "__syncthreads()");
}

void named_barrier(int id, int threads) {
  const checks::InBuiltin builtin;
  if (id < 0 || id > 15)
    block_of_caller("bar.sync").barrier(0, -1, "a named barrier with an id outside 0 to 15");
  block_of_caller("bar.sync").barrier(id, threads, "a named barrier (bar.sync)");
}

std::uint64_t shuffle_xor(unsigned mask, std::uint64_t value, int lane_mask, int width) {
  const checks::InBuiltin builtin;
  return block_of_caller("__shfl_xor_sync").shuffle_xor(mask, value, lane_mask, width);
}

void sync_warp(unsigned mask) {
  const checks::InBuiltin builtin;
  block_of_caller("__syncwarp").sync_warp(mask);
}

void grid_sync() {
  const checks::InBuiltin builtin;
  block_of_caller("grid.sync()").grid_sync();
}

// The builtins below are the emulator's code, called by a kernel's: the check of a kernel's host addresses
// leaves them out (checks::InBuiltin).
bool block_shared_memory(std::uintptr_t address, std::uintptr_t* begin, std::size_t* bytes) {
  return tls_block != nullptr && tls_block->shared_memory_holding(address, begin, bytes);
}

void* shared_variable_storage(const void* tag, std::size_t bytes, std::size_t alignment) {
  const checks::InBuiltin builtin;
  return block_of_caller("__shared__").shared_variable(tag, bytes, alignment);
}

void* dynamic_shared_memory() {
  const checks::InBuiltin builtin;
  return block_of_caller("extern __shared__").dynamic_shared();
}

void programmatic_wait() {
  const checks::InBuiltin builtin;
  block_of_caller("cudaGridDependencySynchronize()").programmatic_wait();
}

void programmatic_trigger() {
  const checks::InBuiltin builtin;
  block_of_caller("cudaTriggerProgrammaticLaunchCompletion()").programmatic_trigger();
}

long long clock_ticks() {
  const checks::InBuiltin builtin;
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

}  // namespace mnistdp::emu
