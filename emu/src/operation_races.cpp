#include "emu/src/operation_races.hpp"

#include <sched.h>

#include <array>
#include <atomic>
#include <map>
#include <utility>

#include "emu/src/sanitizer.hpp"

namespace mnistdp::emu::operation_races {

// Which launch touched a word: an index into Records::sources (0: none).
using SourceId = std::uint32_t;

struct Source {
  Epoch operation;
  int device = 0;
  const char* kernel = "";
};

// A word's (or byte's) accesses: the last write, and the reads since that a later write may not be ordered
// after. Three reads from launches that nothing orders among themselves are kept; a fourth takes the first's
// place, so that a write racing with that one only goes unreported.
struct Record {
  SourceId writer = 0;
  std::array<SourceId, 3> readers{};
};

constexpr std::size_t kPageRecords = 1024;
using Page = std::array<Record, kPageRecords>;

// One allocation's records, in pages made as its words are first touched.
class AllocationRecords {
 public:
  explicit AllocationRecords(std::uintptr_t base) : base_(base) {}

  Record& at(std::uintptr_t address, bool byte) {
    const std::size_t index = byte ? address - base_ : (address - base_) / sizeof(std::uint32_t);
    std::vector<std::unique_ptr<Page>>& pages = byte ? bytes_ : words_;
    const std::size_t page = index / kPageRecords;
    if (page >= pages.size()) pages.resize(page + 1);
    if (!pages[page]) pages[page] = std::make_unique<Page>();
    return (*pages[page])[index % kPageRecords];
  }

 private:
  std::uintptr_t base_;
  std::vector<std::unique_ptr<Page>> words_;
  std::vector<std::unique_ptr<Page>> bytes_;
};

namespace {

// The records of every launch's accesses, for as long as their memory lives. Taken under a spin lock: the
// blocks of a cooperative launch or a programmatic chain record from OS threads of their own, and a mutex
// would be a synchronisation ThreadSanitizer sees, ordering the very threads it is to check.
struct Records {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  std::map<std::uintptr_t, std::shared_ptr<AllocationRecords>> allocations;  // by base address
  std::vector<Source> sources{Source{}};
};

Records& records() {
  static auto* const r = new Records;  // never freed: a kernel's access may come during static destruction
  return *r;
}

class Locked {
 public:
  explicit Locked(Records& r) : r_(r) {
    while (r_.busy.test_and_set(std::memory_order_acquire))
      sched_yield();
  }
  ~Locked() { r_.busy.clear(std::memory_order_release); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  Records& r_;
};

thread_local Step* current_step = nullptr;

}  // namespace

Step::Step(History start, std::vector<std::pair<std::uint64_t, Epoch>> kernels, Epoch first, int device)
    : start_(std::move(start)), kernels_(std::move(kernels)), first_(first), device_(device) {
  outer_ = std::exchange(current_step, this);
}

Step::~Step() {
  current_step = outer_;
}

Epoch Step::epoch_of(std::uint64_t launch) const {
  for (const auto& [number, epoch] : kernels_)
    if (number == launch) return epoch;
  return first_;
}

Place Step::place_of(std::uint64_t launch, const std::uint64_t* previous) {
  Place p;
  const Step* s = current_step;
  if (!s) return p;  // no operation: nothing to place it by (own.lane stays 0)
  p.own = s->epoch_of(launch);
  p.device = s->device_;
  p.before_wait = s->start_;
  p.after_wait = s->start_;
  if (previous) p.after_wait.add(s->epoch_of(*previous));
  return p;
}

Launch::Launch(const Place& place, const char* kernel, const std::vector<Allocation>& allocations)
    : place_(place) {
  const race::IgnoreAccesses own_memory;
  Records& r = records();
  const Locked lock(r);
  source_ = static_cast<SourceId>(r.sources.size());
  r.sources.push_back(Source{place.own, place.device, kernel});
  records_.reserve(allocations.size());
  for (const Allocation& a : allocations) {
    const auto base = reinterpret_cast<std::uintptr_t>(a.base);
    std::shared_ptr<AllocationRecords>& slot = r.allocations[base];
    if (!slot) slot = std::make_shared<AllocationRecords>(base);
    records_.push_back(slot);
  }
}

bool Launch::access(std::size_t allocation, std::uintptr_t address, bool byte, bool write, bool waited,
                    Conflict& conflict) {
  const History& history = waited ? place_.after_wait : place_.before_wait;
  // The pages, allocated by whichever emulated thread touches a word first, are no access of theirs.
  const race::IgnoreAccesses own_memory;
  Records& r = records();
  const Locked lock(r);
  Record& record = records_[allocation]->at(address, byte);
  // An earlier access is ordered before this one when its launch is this one, or another of the same
  // operation (a graph's kernels run in order), or in this one's history.
  const auto ordered = [&](SourceId id) {
    if (id == 0 || id == source_) return true;
    const Epoch e = r.sources[id].operation;
    return e == place_.own || history.covers(e);
  };
  const auto races_with = [&](SourceId id, bool wrote) {
    const Source& s = r.sources[id];
    conflict = Conflict{wrote, s.kernel, s.operation, s.device};
    return true;
  };
  bool race = false;
  if (!ordered(record.writer)) {
    race = races_with(record.writer, true);
  } else if (write) {
    for (const SourceId id : record.readers) {
      if (!ordered(id)) {
        race = races_with(id, false);
        break;
      }
    }
  }
  if (write) {
    record.writer = source_;
    record.readers = {};
    return race;
  }
  // A write ordered after this read is after every read ordered before it, and after every earlier
  // operation of its stream: those need not be kept.
  std::size_t free_slot = record.readers.size();
  for (std::size_t i = 0; i < record.readers.size(); ++i) {
    SourceId& id = record.readers[i];
    if (id == source_) return race;
    const Epoch e = r.sources[id].operation;
    if (id != 0 && (ordered(id) || (e.lane == place_.own.lane && e.seq <= place_.own.seq))) id = 0;
    if (id == 0 && free_slot == record.readers.size()) free_slot = i;
  }
  record.readers[free_slot == record.readers.size() ? 0 : free_slot] = source_;
  return race;
}

void forget(const void* base) {
  Records& r = records();
  const Locked lock(r);
  r.allocations.erase(reinterpret_cast<std::uintptr_t>(base));
}

}  // namespace mnistdp::emu::operation_races
