#include "emu/src/checks/operation_races.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <string>
#include <utility>

#include "emu/src/checks/sanitizer.hpp"

namespace mnistdp::emu::operation_races {

// Which launch touched a word: an index into Records::sources (0: none).
using SourceId = std::uint32_t;

struct Source {
  Epoch operation;
  int device = 0;
  const char* name = "";  // the kernel's, or the device operation's
  bool kernel = false;
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
    const std::size_t index = index_of(address, byte);
    std::vector<std::unique_ptr<Page>>& pages = byte ? bytes_ : words_;
    const std::size_t page = index / kPageRecords;
    if (page >= pages.size()) pages.resize(page + 1);
    if (!pages[page]) pages[page] = std::make_unique<Page>();
    return (*pages[page])[index % kPageRecords];
  }

  // The record, if one was made; null otherwise (nothing touched it yet).
  const Record* find(std::uintptr_t address, bool byte) const {
    const std::size_t index = index_of(address, byte);
    const std::vector<std::unique_ptr<Page>>& pages = byte ? bytes_ : words_;
    const std::size_t page = index / kPageRecords;
    return page < pages.size() && pages[page] ? &(*pages[page])[index % kPageRecords] : nullptr;
  }

  bool any_bytes() const { return !bytes_.empty(); }

 private:
  std::size_t index_of(std::uintptr_t address, bool byte) const {
    return byte ? address - base_ : (address - base_) / sizeof(std::uint32_t);
  }

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

// One access's place: who makes it and what is ordered before it.
struct Accessor {
  SourceId source = 0;
  Epoch own;
  const History* history = nullptr;
};

// Whether the earlier access by `id` is ordered before `now`: made by the same launch or operation (a
// graph's kernels run in order), or in its history.
bool ordered(const Records& r, SourceId id, const Accessor& now) {
  if (id == 0 || id == now.source) return true;
  const Epoch e = r.sources[id].operation;
  return e == now.own || now.history->covers(e);
}

// Whether `record` holds an access that `now`'s (a write when `write`) races with; if so, `conflict` names
// it.
bool conflicts(const Records& r, const Record& record, const Accessor& now, bool write, Conflict& conflict) {
  const auto races_with = [&](SourceId id, bool wrote) {
    const Source& s = r.sources[id];
    conflict = Conflict{wrote, s.kernel ? "kernel " + std::string(s.name) : std::string(s.name), s.operation,
                        s.device};
    return true;
  };
  if (!ordered(r, record.writer, now)) return races_with(record.writer, true);
  if (write) {
    for (const SourceId id : record.readers)
      if (!ordered(r, id, now)) return races_with(id, false);
  }
  return false;
}

// Checks `now`'s access against `record`, then records it.
bool check_and_record(const Records& r, Record& record, const Accessor& now, bool write, Conflict& conflict) {
  const bool race = conflicts(r, record, now, write, conflict);
  if (write) {
    record.writer = now.source;
    record.readers = {};
    return race;
  }
  // A write ordered after this read is after every read ordered before it, and after every earlier
  // operation of its stream: those need not be kept.
  std::size_t free_slot = record.readers.size();
  for (std::size_t i = 0; i < record.readers.size(); ++i) {
    SourceId& id = record.readers[i];
    if (id == now.source) return race;
    const Epoch e = r.sources[id].operation;
    if (id != 0 && (ordered(r, id, now) || (e.lane == now.own.lane && e.seq <= now.own.seq))) id = 0;
    if (id == 0 && free_slot == record.readers.size()) free_slot = i;
  }
  record.readers[free_slot == record.readers.size() ? 0 : free_slot] = now.source;
  return race;
}

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
  r.sources.push_back(Source{place.own, place.device, kernel, true});
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
  const Accessor now{source_, place_.own, waited ? &place_.after_wait : &place_.before_wait};
  // The pages, allocated by whichever emulated thread touches a word first, are no access of theirs.
  const race::IgnoreAccesses own_memory;
  Records& r = records();
  const Locked lock(r);
  AllocationRecords& records = *records_[allocation];
  bool race = check_and_record(r, records.at(address, byte), now, write, conflict);
  // A byte is also checked against its word's record, where the device operations' accesses are kept.
  if (byte && !race) {
    if (const Record* word = records.find(address / sizeof(std::uint32_t) * sizeof(std::uint32_t), false))
      race = conflicts(r, *word, now, write, conflict);
  }
  return race;
}

std::optional<std::string> touch(const char* what, const void* p, std::size_t bytes, bool write) {
  const Step* step = current_step;
  if (!step || bytes == 0) return std::nullopt;
  bool whole = false;
  const std::optional<Allocation> a = find_allocation(p, bytes, &whole);
  if (!a) return std::nullopt;  // pageable host memory: the host's, which the check does not watch
  const race::IgnoreAccesses own_memory;
  Records& r = records();
  const Locked lock(r);
  const auto base = reinterpret_cast<std::uintptr_t>(a->base);
  std::shared_ptr<AllocationRecords>& slot = r.allocations[base];
  if (!slot) slot = std::make_shared<AllocationRecords>(base);
  AllocationRecords& records = *slot;
  const Accessor now{static_cast<SourceId>(r.sources.size()), step->first_, &step->start_};
  r.sources.push_back(Source{step->first_, step->device_, what, false});
  constexpr std::uintptr_t kWord = sizeof(std::uint32_t);
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t end = begin + std::min<std::size_t>(bytes, a->bytes - (begin - base));
  Conflict conflict;
  bool race = false;
  std::uintptr_t at = 0;
  for (std::uintptr_t w = begin / kWord * kWord; w < end && !race; w += kWord) {
    race = check_and_record(r, records.at(w, false), now, write, conflict);
    at = w;
  }
  // The kernels' byte accesses are kept byte by byte: checked, where there are any.
  for (std::uintptr_t b = begin; b < end && !race && records.any_bytes(); ++b) {
    if (const Record* record = records.find(b, true)) race = conflicts(r, *record, now, write, conflict);
    at = b;
  }
  if (!race) return std::nullopt;
  return "emulated CUDA: race between operations in " + std::string(what) + ": it " +
         (write ? "writes" : "reads") + " byte " + std::to_string(std::max(at, begin) - base) + " of a " +
         (a->device >= 0 ? "device allocation" : "pinned host allocation") + " of " +
         std::to_string(a->bytes) + " bytes, which " + conflict.by + " on " +
         stream_name(conflict.operation, conflict.device) + (conflict.wrote ? " wrote" : " read") +
         ", and nothing orders that before this operation on " + stream_name(step->first_, step->device_) +
         ": no stream order, event, collective or host synchronisation between them";
}

std::string stream_name(Epoch operation, int device) {
  return "stream #" + std::to_string(operation.lane) + " of device " + std::to_string(device);
}

void forget(const void* base) {
  Records& r = records();
  const Locked lock(r);
  r.allocations.erase(reinterpret_cast<std::uintptr_t>(base));
}

}  // namespace mnistdp::emu::operation_races
