#include "emu/src/libs/nccl_processes.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "emu/src/libs/nccl_ring.hpp"

namespace mnistdp::emu::nccl {
namespace {

constexpr char kIdPrefix[] = "mnistdp-emu-nccl:";
constexpr std::uint64_t kMagic = 0x4e43434c2d656d75ull;
constexpr int kMaxRanks = 64;
// A rank's slot: an all-reduce larger than this goes through it in pieces, each a round of its own.
constexpr std::size_t kPieceFloats = std::size_t{1} << 20;

enum SlotState : std::int32_t { kFree = 0, kJoined = 1, kLeft = 2, kAborted = 3 };

// Shared between processes: only lock-free atomics, which are address-free.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<std::int32_t>::is_always_lock_free);

struct SlotHeader {
  std::atomic<std::int32_t> state;
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> posted;    // the latest round whose send piece is in the slot
  std::atomic<std::uint64_t> consumed;  // the latest round whose sum this rank has taken
  std::atomic<std::uint64_t> count;     // the posted all-reduce's element count
};

struct Header {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::int32_t> nranks;  // 0 until the first rank joins
  std::atomic<std::int32_t> joined;
  SlotHeader slots[kMaxRanks];
};

constexpr std::size_t kDataOffset = (sizeof(Header) + 4095) / 4096 * 4096;

std::string system_message(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// The rendezvous this process made and the ones it has joined: the former are unlinked when it exits if
// not every rank joined them; a rendezvous joined twice in one process would deadlock its engine. Never
// destroyed: a communicator left to the end of the process may still need it.
struct Registry {
  std::mutex mutex;
  pid_t owner = getpid();
  std::set<std::string> made;
  std::set<std::string> joined;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Set at the process's exit: an all-reduce still waiting for its peers then ends, so that the engine's
// thread, which runs it, can be joined.
std::atomic<bool> exiting{false};

void at_exit() {
  exiting.store(true, std::memory_order_release);
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  if (getpid() != reg.owner) return;  // a forked child's copy: not its to unlink
  for (const std::string& name : reg.made)
    shm_unlink(name.c_str());
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void* map(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw LinkError(ncclSystemError, system_message("mmap of the rendezvous"));
  return p;
}

std::string name_of(const ncclUniqueId& id) {
  const std::size_t prefix = sizeof kIdPrefix - 1;
  if (std::strncmp(id.internal, kIdPrefix, prefix) != 0 ||
      std::memchr(id.internal, '\0', sizeof id.internal) == nullptr)
    throw LinkError(ncclInvalidArgument, "a unique id that ncclGetUniqueId did not make");
  return std::string(id.internal + prefix);
}

bool process_gone(std::int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) == -1 && errno == ESRCH) return true;
  // A process that has exited but is not yet reaped by its parent answers kill: its state says it.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

struct Segment {
  Segment(void* b, std::size_t n) : base(static_cast<std::byte*>(b)), bytes(n) {}
  ~Segment() { munmap(base, bytes); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Header& header() const { return *reinterpret_cast<Header*>(base); }
  SlotHeader& slot(int rank) const { return header().slots[rank]; }
  float* data(int rank) const {
    return reinterpret_cast<float*>(base + kDataOffset) + static_cast<std::size_t>(rank) * kPieceFloats;
  }
  std::byte* base;
  std::size_t bytes;
};

void make_rendezvous(ncclUniqueId& id) {
  // Never a fixed name: runs side by side, and a rendezvous left behind by a killed run, must not meet.
  std::random_device entropy;
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::uint64_t draw = (std::uint64_t{entropy()} << 32 | entropy()) ^ now;
  char name[64];
  std::snprintf(name, sizeof name, "/mnistdp-emu-nccl-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(draw));
  const Fd fd(shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600));
  if (fd.get() < 0) throw LinkError(ncclSystemError, system_message(std::string("shm_open ") + name));
  if (ftruncate(fd.get(), static_cast<off_t>(kDataOffset)) != 0) {
    const std::string message = system_message(std::string("ftruncate ") + name);
    shm_unlink(name);
    throw LinkError(ncclSystemError, message);
  }
  void* p = nullptr;
  try {
    p = map(fd.get(), kDataOffset);
  } catch (...) {
    shm_unlink(name);
    throw;
  }
  // The file reads as zeros: every atomic starts at 0. The magic, written last, says the header is whole.
  auto* header = new (p) Header;
  header->magic.store(kMagic, std::memory_order_release);
  munmap(p, kDataOffset);
  {
    static const bool registered = std::atexit(at_exit) == 0;
    static_cast<void>(registered);
    std::lock_guard lock(registry().mutex);
    registry().made.insert(name);
  }
  std::memset(id.internal, 0, sizeof id.internal);
  std::snprintf(id.internal, sizeof id.internal, "%s%s", kIdPrefix, name);
}

std::shared_ptr<Link> Link::join(const ncclUniqueId& id, int nranks, int rank) {
  // Registered after the engine is made (the caller's cudaGetDevice), so that it runs before the engine's
  // destructor joins its thread.
  static const bool registered = std::atexit(at_exit) == 0;
  static_cast<void>(registered);
  const std::string name = name_of(id);
  if (nranks > kMaxRanks)
    throw LinkError(ncclInvalidUsage, "a communicator of " + std::to_string(nranks) + " ranks: at most " +
                                          std::to_string(kMaxRanks) + " are emulated");
  Registry& reg = registry();
  if (nranks > 1) {
    std::lock_guard lock(reg.mutex);
    if (reg.joined.count(name))
      throw LinkError(ncclInvalidUsage,
                      "a second rank of one communicator in process " + std::to_string(getpid()) +
                          ": ncclCommInitRankConfig is emulated for one rank per process (ncclCommInitAll "
                          "makes the communicators of several devices of one process)");
  }
  const Fd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (fd.get() < 0) {
    if (errno == ENOENT)
      throw LinkError(ncclInvalidArgument, "the unique id names no rendezvous (" + name +
                                               "): not made by ncclGetUniqueId, its process has exited, or "
                                               "every rank has joined it already");
    throw LinkError(ncclSystemError, system_message("shm_open " + name));
  }
  std::shared_ptr<Link> link(new Link());
  link->name_ = name;
  link->nranks_ = nranks;
  link->rank_ = rank;
  {
    const Segment head(map(fd.get(), kDataOffset), kDataOffset);
    Header& h = head.header();
    if (h.magic.load(std::memory_order_acquire) != kMagic)
      throw LinkError(ncclInvalidArgument,
                      "the unique id names something else than a rendezvous (" + name + ")");
    std::int32_t expected = 0;
    if (!h.nranks.compare_exchange_strong(expected, nranks) && expected != nranks)
      throw LinkError(ncclInvalidArgument,
                      "rank " + std::to_string(rank) + " joins a communicator of " + std::to_string(nranks) +
                          " ranks, which another rank made of " + std::to_string(expected));
    std::int32_t free = kFree;
    if (!h.slots[rank].state.compare_exchange_strong(free, kJoined))
      throw LinkError(ncclInvalidArgument,
                      "rank " + std::to_string(rank) + " of this communicator has joined it already");
    h.slots[rank].pid.store(static_cast<std::int32_t>(getpid()));
  }
  const std::size_t bytes = kDataOffset + static_cast<std::size_t>(nranks) * kPieceFloats * sizeof(float);
  // Every rank grows the file to the same size (the number of ranks is agreed above); pages are given only
  // as the slots are written.
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) throw LinkError(ncclSystemError, system_message("fstat " + name));
  if (static_cast<std::size_t>(st.st_size) < bytes && ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    throw LinkError(ncclSystemError, system_message("ftruncate " + name));
  link->segment_ = std::make_unique<Segment>(map(fd.get(), bytes), bytes);
  // The last rank to arrive unlinks the name: the ranks keep their mappings, and nothing stays behind.
  if (link->segment_->header().joined.fetch_add(1, std::memory_order_acq_rel) + 1 == nranks) {
    shm_unlink(name.c_str());
    std::lock_guard lock(reg.mutex);
    reg.made.erase(name);
  }
  if (nranks > 1) {
    std::lock_guard lock(reg.mutex);
    reg.joined.insert(name);
  }
  return link;
}

Link::~Link() {
  std::lock_guard lock(registry().mutex);
  registry().joined.erase(name_);
}

bool Link::all_joined() {
  if (segment_->header().joined.load(std::memory_order_acquire) == nranks_) return true;
  check_peers();
  return false;
}

std::optional<Failure> Link::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void Link::record(ncclResult_t code, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (!failure_) failure_ = Failure{code, message};
}

void Link::check_peers() {
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const SlotHeader& s = segment_->slot(r);
    const std::int32_t state = s.state.load(std::memory_order_acquire);
    const std::string who = "rank " + std::to_string(r) + " of " + std::to_string(nranks_);
    if (state == kAborted)
      record(ncclRemoteError, who + " aborted its communicator");
    else if (state == kLeft)
      record(ncclRemoteError, who + " destroyed its communicator while rank " + std::to_string(rank_) +
                                  " still waited for it in an all-reduce");
    else if (state == kJoined && process_gone(s.pid.load()))
      record(ncclRemoteError, who + " (process " + std::to_string(s.pid.load()) + ") exited");
  }
}

template <class Done>
bool Link::wait(Done done) {
  for (unsigned spin = 0;; ++spin) {
    const bool failed = failure().has_value();
    // After a failure only the abort ends the wait, as it ends NCCL's kernel.
    if (!failed && done()) return true;
    if (aborted_.load(std::memory_order_acquire) || exiting.load(std::memory_order_acquire)) return false;
    if (!failed && spin % 256 == 255) check_peers();
    if (spin < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void Link::all_reduce(const float* send, float* recv, std::size_t count) {
  const auto nan = [&](std::size_t from) {
    std::fill(recv + from, recv + count, std::numeric_limits<float>::quiet_NaN());
  };
  std::vector<const float*> slots(static_cast<std::size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r)
    slots[static_cast<std::size_t>(r)] = segment_->data(r);
  for (std::size_t offset = 0; offset < count; offset += kPieceFloats) {
    const std::size_t n = std::min(kPieceFloats, count - offset);
    const std::uint64_t round = ++round_;
    SlotHeader& mine = segment_->slot(rank_);
    const auto every_rank = [&](std::atomic<std::uint64_t> SlotHeader::*field, std::uint64_t at_least) {
      for (int r = 0; r < nranks_; ++r)
        if ((segment_->slot(r).*field).load(std::memory_order_acquire) < at_least) return false;
      return true;
    };
    // The slot is free once every rank has taken the previous round's sum from it.
    if (!wait([&] { return every_rank(&SlotHeader::consumed, round - 1); })) return nan(offset);
    std::memcpy(segment_->data(rank_), send + offset, n * sizeof(float));
    mine.count.store(count, std::memory_order_relaxed);
    mine.posted.store(round, std::memory_order_release);
    if (!wait([&] { return every_rank(&SlotHeader::posted, round); })) return nan(offset);
    for (int r = 0; r < nranks_; ++r) {
      const std::uint64_t theirs = segment_->slot(r).count.load(std::memory_order_relaxed);
      if (theirs != count) {
        record(ncclInvalidUsage, "rank " + std::to_string(r) + " called ncclAllReduce with " +
                                     std::to_string(theirs) + " elements, rank " + std::to_string(rank_) +
                                     " with " + std::to_string(count));
        wait([] { return false; });
        return nan(offset);
      }
    }
    nccl::ring_sum(slots, offset, offset + n, count, recv + offset);
    mine.consumed.store(round, std::memory_order_release);
  }
}

void Link::abort() {
  aborted_.store(true, std::memory_order_release);
  segment_->slot(rank_).state.store(kAborted, std::memory_order_release);
}

void Link::leave() {
  segment_->slot(rank_).state.store(kLeft, std::memory_order_release);
}

}  // namespace mnistdp::emu::nccl
