#include "emu/src/checks/arena.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "emu/device_work.hpp"
#include "emu/src/checks/device_shadow.hpp"
#include "emu/src/checks/sanitizer.hpp"
#include "emu/src/runtime/config.hpp"

namespace mnistdp::emu::arena {
namespace {

// Each emulated device has a part of the range of its own, so that the shadow of one device's memory can be
// hidden from another's kernels in one call (device_shadow.hpp). Room for a device's 16 GiB many times over:
// the next-fit placement goes through its part before it reuses an address. Reserved, not committed: only
// pages an allocation touches take memory.
constexpr std::size_t kReserved = std::size_t{256} << 30;  // for all devices, when they are 8 or fewer
constexpr std::size_t kLeastPerDevice = std::size_t{32} << 30;
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

  std::byte* allocate(std::size_t bytes, std::size_t slack, int device) {
    const std::size_t need = footprint(bytes, slack);
    std::lock_guard lock(mutex_);
    Part& part = parts_.at(static_cast<std::size_t>(device));
    std::byte* const part_base = base_ + static_cast<std::size_t>(device) * per_device_;
    // Next-fit: the first free run at or after the rover that holds `need`, else the first from the start.
    auto fits = [&](auto from, auto to) {
      for (auto it = from; it != to; ++it)
        if (it->second >= need) return it;
      return to;
    };
    auto& free = part.free;
    auto it = free.upper_bound(part.rover);
    if (it != free.begin() && std::prev(it)->first + std::prev(it)->second > part.rover) --it;
    auto found = fits(it, free.end());
    if (found == free.end()) {
      found = fits(free.begin(), it);
      if (found == it) return nullptr;
    }
    auto [start, length] = *found;
    // Within a run that holds the rover, start at the rover: a run just freed behind it waits its turn.
    std::size_t at = start;
    if (start < part.rover && part.rover < start + length && start + length - part.rover >= need)
      at = part.rover;
    free.erase(found);
    if (at > start) free.emplace(start, at - start);
    if (at + need < start + length) free.emplace(at + need, start + length - (at + need));
    part.rover = at + need;
    if (part.rover > part.used) {
      // The part's end not yet handed out, up to the huge page that the part is opened by, is no kernel's.
      part.used = part.rover;
      device_shadow::poison(part_base + part.used, round_up(part.used, kHugePage) - part.used);
    }
    if (opened_ > 0) expose(device);
    std::byte* base = part_base + at;
    // ThreadSanitizer's record of an earlier allocation here is not this one's; what follows the allocation
    // is no kernel's.
    race::forget(base, need);
    device_shadow::unpoison(base, bytes);
    device_shadow::poison(base + bytes, need - bytes);
    return base;
  }

  void release(std::byte* base, std::size_t bytes, std::size_t slack) {
    const auto device = static_cast<std::size_t>(base - base_) / per_device_;
    std::byte* const part_base = base_ + device * per_device_;
    std::size_t start = static_cast<std::size_t>(base - part_base);
    std::size_t length = footprint(bytes, slack);
    device_shadow::poison(base, length);  // a use after free
    std::lock_guard lock(mutex_);
    auto& free = parts_[device].free;
    auto next = free.lower_bound(start);
    if (next != free.end() && start + length == next->first) {
      length += next->second;
      next = free.erase(next);
    }
    if (next != free.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == start) {
        start = before->first;
        length += before->second;
        free.erase(before);
      }
    }
    free.emplace(start, length);
    // The huge pages wholly free give their memory back; they read as zeros when allocated again.
    const std::size_t first = round_up(start, kHugePage);
    const std::size_t last = (start + length) / kHugePage * kHugePage;
    if (first < last) madvise(part_base + first, last - first, MADV_DONTNEED);
  }

  const std::byte* begin() const { return base_; }
  std::size_t bytes() const { return per_device_ * parts_.size(); }

  bool contains(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + bytes();
  }

  void open() {
    std::lock_guard lock(mutex_);
    if (opened_++ == 0)
      for (std::size_t d = 0; d < parts_.size(); ++d)
        expose(static_cast<int>(d));
  }

  void close() {
    std::lock_guard lock(mutex_);
    if (--opened_ != 0) return;
    for (std::size_t d = 0; d < parts_.size(); ++d) {
      Part& part = parts_[d];
      if (part.exposed == 0) continue;
      if (mprotect(base_ + d * per_device_, part.exposed, PROT_NONE) != 0)
        fail("mprotect (closing device memory to the host)");
      part.exposed = 0;
    }
  }

 private:
  // A device's part of the range; offsets from its start.
  struct Part {
    std::map<std::size_t, std::size_t> free;  // free runs: offset, length
    std::size_t rover = 0;                    // where the last allocation ended
    std::size_t used = 0;                     // the end of the furthest allocation ever made
    std::size_t exposed = 0;                  // readable and writable now: [0, exposed)
  };

  Range() : parts_(static_cast<std::size_t>(std::max(config().devices, 1))) {
    per_device_ = std::max(kLeastPerDevice, kReserved / parts_.size()) / kHugePage * kHugePage;
    // Reserved with room to align it to a huge page.
    void* p =
        mmap(nullptr, bytes() + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("mmap (reserving device memory's address range)");
    base_ = static_cast<std::byte*>(p) +
            (kHugePage - reinterpret_cast<std::uintptr_t>(p) % kHugePage) % kHugePage;
    madvise(base_, bytes(), MADV_HUGEPAGE);  // a hint: without huge pages, only slower
    for (Part& part : parts_)
      part.free.emplace(0, per_device_);
    device_shadow::device_range(base_, per_device_, static_cast<int>(parts_.size()));
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

  // Makes [0, used) of a device's part readable and writable, in whole huge pages; called with the range
  // open.
  void expose(int device) {
    Part& part = parts_[static_cast<std::size_t>(device)];
    const std::size_t want = round_up(part.used, kHugePage);
    if (want <= part.exposed) return;
    if (mprotect(base_ + static_cast<std::size_t>(device) * per_device_ + part.exposed, want - part.exposed,
                 PROT_READ | PROT_WRITE) != 0)
      fail("mprotect (opening device memory to the host)");
    part.exposed = want;
  }

  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }

  std::mutex mutex_;
  std::byte* base_ = nullptr;
  std::vector<Part> parts_;  // a device's each
  std::size_t per_device_ = 0;
  int opened_ = 0;  // Accesses alive
};

}  // namespace

std::byte* allocate(std::size_t bytes, std::size_t slack, int device) {
  return Range::get().allocate(bytes, slack, device);
}

void release(std::byte* base, std::size_t bytes, std::size_t slack) {
  Range::get().release(base, bytes, slack);
}

const std::byte* begin() {
  return Range::get().begin();
}

std::size_t bytes() {
  return Range::get().bytes();
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
