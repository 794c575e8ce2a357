#include "emu/src/checks/device_shadow.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "emu/src/checks/device_addresses.hpp"
#include "emu/src/checks/sanitizer.hpp"

#if defined(MNISTDP_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace mnistdp::emu::device_shadow {

#if defined(MNISTDP_EMU_ASAN)

void poison(const void* begin, std::size_t bytes) {
  ASAN_POISON_MEMORY_REGION(begin, bytes);
}

void unpoison(const void* begin, std::size_t bytes) {
  ASAN_UNPOISON_MEMORY_REGION(begin, bytes);
}

// AddressSanitizer's shadow of host memory is its own; the check of a kernel's host addresses is made
// through SanitizerCoverage's callbacks there (device_addresses.hpp).
void allow(const void*, std::size_t) {}
void disallow(const void*, std::size_t) {}
void device_range(const void*, std::size_t, int) {}
void show_devices(const std::vector<bool>&) {}

#elif defined(MNISTDP_EMU_DEVICE_SHADOW)

namespace {

// AddressSanitizer's x86-64 mapping: a shadow byte for each 8 bytes, at (address >> 3) + kOffset; 0: all 8
// addressable, k in 1 to 7: the first k, negative: none. Of its regions only the shadows of low and high
// memory are reserved (the gap between them, the shadow of the shadow, is never read: no address there is
// used).
constexpr std::uintptr_t kOffset = 0x7fff8000;
constexpr std::uintptr_t kLowShadowBegin = 0x00007fff8000, kLowShadowEnd = 0x00008fff7000;
constexpr std::uintptr_t kHighShadowBegin = 0x02008fff7000, kHighShadowEnd = 0x10007fff8000;
constexpr unsigned char kPoisoned = 0xf7;  // AddressSanitizer's "user poisoned" value
constexpr std::uintptr_t kPage = 4096;
// The shadow of host memory is filled a chunk at a time where it can be, the shadow of 2 MiB.
constexpr std::uintptr_t kChunk = std::uintptr_t{256} << 10;

std::uintptr_t shadow_of(std::uintptr_t address) {
  return (address >> 3) + kOffset;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "emulated CUDA: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

// The shadow of every address.
//
// Host memory's is poisoned, since a kernel may not touch the host's memory, but for the host memory the
// kernel owns here and pinned memory (device_addresses.hpp), which the emulator allows as it hands it out.
// It is made where it is first read or written: the shadow's regions are registered with userfaultfd(2), and
// a thread of the shadow's own fills each page missing with poison as the instrumented code first touches it
// (before any thread can read it: no signal handler, so no clash with a test framework's). Where
// userfaultfd is refused (a container's seccomp filter), the shadow of host memory stays addressable and
// the other devices' memory shown: a kernel's access there goes unchecked, and the emulator says so once.
//
// Device memory's (arena.hpp) is written as allocations come and go, through a view of its own, since the
// kernels of one device must not see the shadow of another's memory: it lies in a file, and device d's part
// of it is mapped in place only while the kernels running may touch d's memory (show_devices); hidden, it is
// a registered region again, which reads as poison.
class Shadow {
 public:
  static Shadow& get() {
    static Shadow shadow;
    return shadow;
  }

  // Writes the shadow of [begin, begin + bytes): poisoned or addressable in whole granules, and an unaligned
  // end's granule addressable up to the end.
  void write(std::uintptr_t begin, std::uintptr_t bytes, bool addressable) {
    if (bytes == 0) return;
    const std::uintptr_t end = begin + bytes;
    const std::uintptr_t first = shadow_of(begin);
    const std::uintptr_t last = shadow_of(end - 1) + 1;  // past the granule holding the last byte
    const int value = addressable ? 0 : kPoisoned;
    if (first >= devices_begin_ && first < devices_end_) {
      // Device memory, through the writer's view: a device's part may be hidden in place.
      unsigned char* at = writer_ + (first - devices_begin_);
      std::memset(at, value, last - first);
      if (addressable && end % 8 != 0) at[last - first - 1] = static_cast<unsigned char>(end % 8);
      return;
    }
    if (!checked_) return;  // the shadow of host memory is all addressable
    if (addressable) {
      clear(first, last);
      if (end % 8 != 0) *reinterpret_cast<unsigned char*>(last - 1) = static_cast<unsigned char>(end % 8);
    } else {
      std::memset(reinterpret_cast<void*>(first), kPoisoned, last - first);  // a page missing is filled first
    }
  }

  // Device memory's range, `devices` parts of `part` bytes each, aligned to 2 MiB: its shadow mapped at
  // once, every byte addressable until the arena poisons it, and again elsewhere, for the emulator's writes.
  void device_range(std::uintptr_t begin, std::uintptr_t part, int devices) {
    std::lock_guard lock(mutex_);
    const std::uintptr_t first = shadow_of(begin), last = shadow_of(begin + part * devices - 1) + 1;
    const int file = memfd_create("mnistdp-emu-device-shadow", MFD_CLOEXEC);
    if (file < 0 || ftruncate(file, static_cast<off_t>(last - first)) != 0)
      fail("cannot make the file of device memory's shadow");
    void* writer = mmap(nullptr, last - first, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    if (writer == MAP_FAILED || mmap(reinterpret_cast<void*>(first), last - first, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_FIXED, file, 0) == MAP_FAILED)
      fail("cannot map the shadow of device memory");
    file_ = file;
    writer_ = static_cast<unsigned char*>(writer);
    devices_begin_ = first;
    devices_end_ = last;
    part_shadow_ = part / 8;
    shown_.assign(static_cast<std::size_t>(devices), true);
  }

  // Shows the shadow of device d's part where visible[d], and hides it elsewhere.
  void show_devices(const std::vector<bool>& visible) {
    if (!checked_) return;
    std::lock_guard lock(mutex_);
    for (std::size_t d = 0; d < shown_.size() && d < visible.size(); ++d) {
      if (shown_[d] == visible[d]) continue;
      const std::uintptr_t part = devices_begin_ + d * part_shadow_;
      if (visible[d]) {
        if (mmap(reinterpret_cast<void*>(part), part_shadow_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 file_, static_cast<off_t>(part - devices_begin_)) == MAP_FAILED)
          fail("cannot show the shadow of a device's memory");
      } else {
        reserve(part, part + part_shadow_, MAP_FIXED);
      }
      shown_[d] = visible[d];
    }
  }

 private:
  Shadow() {
    const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
    uffdio_api api{};
    api.api = UFFD_API;
    if (uffd >= 0 && ioctl(uffd, UFFDIO_API, &api) == 0) {
      uffd_ = uffd;
      checked_ = true;
    } else {
      if (uffd >= 0) close(uffd);
      std::fprintf(
          stderr,
          "emulated CUDA: userfaultfd(2) is refused here (%s): kernels' accesses to host memory and to "
          "another device's memory go unchecked\n",
          std::strerror(errno));
    }
    reserve(kLowShadowBegin, kLowShadowEnd, MAP_FIXED_NOREPLACE);
    reserve(kHighShadowBegin, kHighShadowEnd, MAP_FIXED_NOREPLACE);
    if (!checked_) return;
    void* poison = mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (poison == MAP_FAILED) fail("cannot map the shadow's poison");
    std::memset(poison, kPoisoned, kChunk);
    poison_ = static_cast<unsigned char*>(poison);
    std::thread(&Shadow::fill, this).detach();
  }

  // Reserves [begin, end) of the shadow: registered, so that it reads as poison, where the check is made.
  void reserve(std::uintptr_t begin, std::uintptr_t end, int fixed) const {
    void* p = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | fixed, -1, 0);
    if (p != reinterpret_cast<void*>(begin)) {
      std::fprintf(stderr, "emulated CUDA: cannot reserve the shadow of memory at %#llx: %s\n",
                   static_cast<unsigned long long>(begin), p == MAP_FAILED ? std::strerror(errno) : "moved");
      std::abort();
    }
    if (!checked_) return;
    uffdio_register reg{};
    reg.range = {begin, end - begin};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) fail("cannot register the shadow with userfaultfd");
  }

  // Makes [first, last) of host memory's shadow addressable: its whole pages missing become the zero page,
  // which takes no memory (a whole thread stack's shadow, say), rather than the poison a fault would fill;
  // the rest is written.
  void clear(std::uintptr_t first, std::uintptr_t last) const {
    const std::uintptr_t begin = std::min(last, (first + kPage - 1) / kPage * kPage);
    const std::uintptr_t end = std::max(begin, last / kPage * kPage);
    std::memset(reinterpret_cast<void*>(first), 0, begin - first);
    for (std::uintptr_t page = begin; page < end;) {
      uffdio_zeropage zero{};
      zero.range = {page, end - page};
      if (ioctl(uffd_, UFFDIO_ZEROPAGE, &zero) == 0) break;
      if (zero.zeropage > 0) {
        page += static_cast<std::uintptr_t>(zero.zeropage);  // stopped short, at a page there already
      } else {
        std::memset(reinterpret_cast<void*>(page), 0, kPage);  // there already
        page += kPage;
      }
    }
    std::memset(reinterpret_cast<void*>(end), 0, last - end);
  }

  // The shadow's own thread: fills each missing page the instrumented code touches with poison, the whole
  // chunk around it where no page of it is there yet.
  void fill() {
    while (true) {
      uffd_msg message{};
      const ssize_t got = read(uffd_, &message, sizeof message);
      if (got != static_cast<ssize_t>(sizeof message)) {
        if (got < 0 && errno == EINTR) continue;
        fail("cannot read the shadow's faults");
      }
      if (message.event != UFFD_EVENT_PAGEFAULT) continue;
      const std::uintptr_t at = message.arg.pagefault.address;
      uffdio_copy chunk{};
      chunk.dst = at / kChunk * kChunk;
      chunk.src = reinterpret_cast<std::uintptr_t>(poison_);
      chunk.len = kChunk;
      if (ioctl(uffd_, UFFDIO_COPY, &chunk) == 0) continue;
      uffdio_copy page{};  // a page of the chunk was there, or the chunk spans two regions
      page.dst = at / kPage * kPage;
      page.src = reinterpret_cast<std::uintptr_t>(poison_);
      page.len = kPage;
      if (ioctl(uffd_, UFFDIO_COPY, &page) == 0) continue;
      uffdio_range wake{page.dst, kPage};  // there already: the faulting thread only waits to be woken
      ioctl(uffd_, UFFDIO_WAKE, &wake);
    }
  }

  std::mutex mutex_;
  int uffd_ = -1;
  bool checked_ = false;
  unsigned char* poison_ = nullptr;  // a chunk's worth of poisoned shadow
  // Device memory's shadow, [devices_begin_, devices_end_), the file's [0, devices_end_ - devices_begin_):
  // device d's part at devices_begin_ + d * part_shadow_, shown or hidden; the same in the writer's view,
  // always mapped.
  int file_ = -1;
  std::uintptr_t devices_begin_ = 0, devices_end_ = 0, part_shadow_ = 1;
  std::vector<bool> shown_;
  unsigned char* writer_ = nullptr;
};

}  // namespace

// Device allocations are 256-byte aligned and guard zones follow them, so `begin` is 8-byte aligned
// whenever a range starts a granule; an unaligned end leaves its granule's first bytes addressable.
void poison(const void* begin, std::size_t bytes) {
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t first = (b + 7) / 8 * 8;  // a granule partly before `begin` keeps its bytes
  const std::uintptr_t end = (b + bytes) / 8 * 8;
  if (first < end) Shadow::get().write(first, end - first, false);
}

void unpoison(const void* begin, std::size_t bytes) {
  Shadow::get().write(reinterpret_cast<std::uintptr_t>(begin), bytes, true);
}

void allow(const void* begin, std::size_t bytes) {
  unpoison(begin, bytes);
}

void disallow(const void* begin, std::size_t bytes) {
  // Every granule the bytes touch: host allocations are 16-byte aligned, so no other allocation shares one.
  const auto b = reinterpret_cast<std::uintptr_t>(begin) / 8 * 8;
  const auto end = (reinterpret_cast<std::uintptr_t>(begin) + bytes + 7) / 8 * 8;
  if (b < end) Shadow::get().write(b, end - b, false);
}

void device_range(const void* begin, std::size_t part, int devices) {
  Shadow::get().device_range(reinterpret_cast<std::uintptr_t>(begin), part, devices);
}

void show_devices(const std::vector<bool>& visible) {
  Shadow::get().show_devices(visible);
}

#else

void poison(const void*, std::size_t) {}
void unpoison(const void*, std::size_t) {}
void allow(const void*, std::size_t) {}
void disallow(const void*, std::size_t) {}
void device_range(const void*, std::size_t, int) {}
void show_devices(const std::vector<bool>&) {}

#endif

}  // namespace mnistdp::emu::device_shadow

#if defined(MNISTDP_EMU_DEVICE_SHADOW) && !defined(MNISTDP_EMU_ASAN)
// The entry points of AddressSanitizer's instrumentation (-fsanitize=address -fsanitize-recover=address,
// without its stack, globals and use-after-scope checks), which the kernels' code calls.
extern "C" {

// Called by each instrumented file's constructor, before any of its code runs.
void __asan_init() {
  static const bool made = [] {
    // The shadow first, then the host memory every kernel may touch: the program's static data.
    static_cast<void>(mnistdp::emu::device_shadow::Shadow::get());
    mnistdp::emu::device_addresses::allow_program();
    return true;
  }();
  static_cast<void>(made);
}

void __asan_version_mismatch_check_v8() {}
void __asan_handle_no_return() {}
// GCC's check of the order of dynamic initialisation, which this runtime does not make.
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}

void* __asan_memcpy(void* to, const void* from, std::size_t bytes) {
  return std::memcpy(to, from, bytes);
}
void* __asan_memmove(void* to, const void* from, std::size_t bytes) {
  return std::memmove(to, from, bytes);
}
void* __asan_memset(void* to, int value, std::size_t bytes) {
  return std::memset(to, value, bytes);
}

// A poisoned shadow byte: the access is checked against the allocations, and recorded if illegal.
#define MNISTDP_EMU_SHADOW_REPORTS(bytes)                               \
  void __asan_report_load##bytes##_noabort(std::uintptr_t address) {    \
    mnistdp::emu::device_addresses::on_poisoned(address, bytes, false); \
  }                                                                     \
  void __asan_report_store##bytes##_noabort(std::uintptr_t address) {   \
    mnistdp::emu::device_addresses::on_poisoned(address, bytes, true);  \
  }
MNISTDP_EMU_SHADOW_REPORTS(1)
MNISTDP_EMU_SHADOW_REPORTS(2)
MNISTDP_EMU_SHADOW_REPORTS(4)
MNISTDP_EMU_SHADOW_REPORTS(8)
MNISTDP_EMU_SHADOW_REPORTS(16)
#undef MNISTDP_EMU_SHADOW_REPORTS

void __asan_report_load_n_noabort(std::uintptr_t address, std::size_t bytes) {
  mnistdp::emu::device_addresses::on_poisoned(address, static_cast<unsigned>(bytes), false);
}
void __asan_report_store_n_noabort(std::uintptr_t address, std::size_t bytes) {
  mnistdp::emu::device_addresses::on_poisoned(address, static_cast<unsigned>(bytes), true);
}

}  // extern "C"
#endif
