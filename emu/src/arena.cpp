#include "emu/src/arena.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

#include "emu/device_work.hpp"
#include "emu/src/device_shadow.hpp"
#include "emu/src/sanitizer.hpp"

namespace mnistdp::emu::arena {
namespace {

// Room for every emulated device's 16 GiB many times over: the next-fit placement goes through it before it
// reuses an address. Reserved, not committed: only pages an allocation touches take memory.
constexpr std::size_t kReserved = std::size_t{256} << 30;
// The unit of the range's protection and of the memory given back: a huge page.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

constexpr std::size_t round_up(std::size_t n, std::size_t unit) {
  return (n + unit - 1) / unit * unit;
}

class Range {
 public:
  static Range& get() {
    static Range range;
    return range;
  }

  std::byte* allocate(std::size_t bytes, std::size_t slack) {
    const std::size_t need = footprint(bytes, slack);
    std::lock_guard lock(mutex_);
    // Next-fit: the first free run at or after the rover that holds `need`, else the first from the start.
    auto fits = [&](auto from, auto to) {
      for (auto it = from; it != to; ++it)
        if (it->second >= need) return it;
      return to;
    };
    auto it = free_.upper_bound(rover_);
    if (it != free_.begin() && std::prev(it)->first + std::prev(it)->second > rover_) --it;
    auto found = fits(it, free_.end());
    if (found == free_.end()) {
      found = fits(free_.begin(), it);
      if (found == it) return nullptr;
    }
    auto [start, length] = *found;
    // Within a run that holds the rover, start at the rover: a run just freed behind it waits its turn.
    std::size_t at = start;
    if (start < rover_ && rover_ < start + length && start + length - rover_ >= need) at = rover_;
    free_.erase(found);
    if (at > start) free_.emplace(start, at - start);
    if (at + need < start + length) free_.emplace(at + need, start + length - (at + need));
    rover_ = at + need;
    if (rover_ > used_) {
      // The range's end not yet handed out, up to the huge page that the range is opened by, is no kernel's.
      used_ = rover_;
      device_shadow::poison(base_ + used_, round_up(used_, kHugePage) - used_);
    }
    if (opened_ > 0) expose(used_);
    std::byte* base = base_ + at;
    // ThreadSanitizer's record of an earlier allocation here is not this one's; what follows the allocation
    // is no kernel's.
    race::forget(base, need);
    device_shadow::unpoison(base, bytes);
    device_shadow::poison(base + bytes, need - bytes);
    return base;
  }

  void release(std::byte* base, std::size_t bytes, std::size_t slack) {
    std::size_t start = static_cast<std::size_t>(base - base_);
    std::size_t length = footprint(bytes, slack);
    device_shadow::poison(base, length);  // a use after free
    std::lock_guard lock(mutex_);
    auto next = free_.lower_bound(start);
    if (next != free_.end() && start + length == next->first) {
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == start) {
        start = before->first;
        length += before->second;
        free_.erase(before);
      }
    }
    free_.emplace(start, length);
    // The huge pages wholly free give their memory back; they read as zeros when allocated again.
    const std::size_t first = round_up(start, kHugePage);
    const std::size_t last = (start + length) / kHugePage * kHugePage;
    if (first < last) madvise(base_ + first, last - first, MADV_DONTNEED);
  }

  const std::byte* begin() const { return base_; }

  bool contains(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + kReserved;
  }

  void open() {
    std::lock_guard lock(mutex_);
    if (opened_++ == 0) expose(used_);
  }

  void close() {
    std::lock_guard lock(mutex_);
    if (--opened_ == 0 && exposed_ > 0) {
      if (mprotect(base_, exposed_, PROT_NONE) != 0) fail("mprotect (closing device memory to the host)");
      exposed_ = 0;
    }
  }

 private:
  Range() {
    // Reserved with room to align it to a huge page.
    void* p =
        mmap(nullptr, kReserved + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("mmap (reserving device memory's address range)");
    base_ = static_cast<std::byte*>(p) +
            (kHugePage - reinterpret_cast<std::uintptr_t>(p) % kHugePage) % kHugePage;
    madvise(base_, kReserved, MADV_HUGEPAGE);  // a hint: without huge pages, only slower
    free_.emplace(0, kReserved);
#if !defined(MNISTDP_EMU_ASAN) && !defined(MNISTDP_EMU_RACE_CHECKS)
    // The sanitizers report a fault themselves, with the address.
    install_fault_report();
#endif
  }

  // A fault at an address of the range, in host code, is reported before the process ends as it would have:
  // the handler puts back the disposition it found, and the faulting access runs again under it.
  static void install_fault_report() {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_action());
  }

  static struct sigaction& previous_action() {
    static struct sigaction previous {};
    return previous;
  }

  static void on_fault(int, siginfo_t* info, void*) {
    const Range& range = get();
    if (range.contains(info->si_addr)) {
      // Only async-signal-safe calls here: write(2) and the digits made by hand.
      char digits[2 + 16 + 1] = "0x";
      auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
      for (int i = 0; i < 16; ++i)
        digits[2 + i] = "0123456789abcdef"[(address >> (60 - 4 * i)) & 0xF];
      digits[18] = '\0';
      const char head[] = "emulated CUDA: host code touched device memory at ";
      const char tail[] =
          ", outside every operation of the emulated devices: device memory is not the host's (on a machine "
          "with a GPU this is a segmentation fault too); copy it with cudaMemcpy\n";
      [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
      ignored = write(STDERR_FILENO, digits, 18);
      ignored = write(STDERR_FILENO, tail, sizeof tail - 1);
    }
    sigaction(SIGSEGV, &previous_action(), nullptr);
  }

  static std::size_t footprint(std::size_t bytes, std::size_t slack) {
    return round_up((bytes == 0 ? 1 : bytes) + slack, kAlignment);
  }

  // Makes [0, used) readable and writable, in whole huge pages; called with the range open.
  void expose(std::size_t used) {
    const std::size_t want = round_up(used, kHugePage);
    if (want <= exposed_) return;
    if (mprotect(base_ + exposed_, want - exposed_, PROT_READ | PROT_WRITE) != 0)
      fail("mprotect (opening device memory to the host)");
    exposed_ = want;
  }

  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }

  std::mutex mutex_;
  std::byte* base_ = nullptr;
  std::map<std::size_t, std::size_t> free_;  // free runs: offset, length
  std::size_t rover_ = 0;                    // where the last allocation ended
  std::size_t used_ = 0;                     // the end of the furthest allocation ever made
  std::size_t exposed_ = 0;                  // readable and writable now: [0, exposed_)
  int opened_ = 0;                           // Accesses alive
};

}  // namespace

std::byte* allocate(std::size_t bytes, std::size_t slack) {
  return Range::get().allocate(bytes, slack);
}

void release(std::byte* base, std::size_t bytes, std::size_t slack) {
  Range::get().release(base, bytes, slack);
}

const std::byte* begin() {
  return Range::get().begin();
}

std::size_t bytes() {
  return kReserved;
}

}  // namespace mnistdp::emu::arena

namespace mnistdp::emu {

DeviceWork::DeviceWork() {
  arena::Range::get().open();
}

DeviceWork::~DeviceWork() {
  arena::Range::get().close();
}

}  // namespace mnistdp::emu
