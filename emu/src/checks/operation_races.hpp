#pragma once
// The emulator's check of races between operations: between kernels, copies, fills, collectives and
// products on streams or devices that nothing orders, and between a dependent kernel of a programmatic launch
// and its primary before the dependent's cudaGridDependencySynchronize() (on with the check of races between
// blocks, MNISTDP_EMU_BLOCK_RACES; docs/emulation.md, "Races between operations"). ThreadSanitizer finds
// these too, but its runtime tells apart at most 256 identities, so after a barrier in a block of 256 threads
// or more it may order the kernels it is to check. This check keeps, for every word of device and pinned
// memory that a kernel or another device operation touches, the one that last wrote it and those that read
// it since, until the memory is freed. An access races with an earlier one unless the earlier one's
// operation is in the later one's history (history.hpp): its stream's order, the events and the legacy
// stream's waits, the collectives, and what the host had waited for when it enqueued the later one. So a
// missing wait is reported in whatever order the engine ran the two.
//
// The kernels' accesses come through the hooks (block_races.cpp); the other device operations (copies, fills,
// collectives, products) record their ranges as they run (touch()). The host's own accesses are not recorded.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "emu/src/runtime/history.hpp"
#include "emu/src/runtime/memory.hpp"

namespace mnistdp::emu::operation_races {

// Where a kernel launch stands among the operations: its own operation, and the history of its threads'
// accesses before and after their cudaGridDependencySynchronize() (the same outside a programmatic chain,
// where the wait returns at once).
struct Place {
  Epoch own;
  int device = 0;
  History before_wait;
  History after_wait;
};

// Set by the engine, on its thread, for as long as it runs the operations it took together (Engine::run):
// the history they start from, and each kernel launch's operation by launch number. Other launches (the
// kernels of a graph) take the first operation's.
class Step {
 public:
  Step(History start, std::vector<std::pair<std::uint64_t, Epoch>> kernels, Epoch first, int device);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // The place of launch number `launch`; `previous` is the launch before it in a programmatic chain, whose
  // completion its threads' wait brings into their history (null outside a chain, or for the chain's first).
  static Place place_of(std::uint64_t launch, const std::uint64_t* previous);

 private:
  Epoch epoch_of(std::uint64_t launch) const;
  friend std::optional<std::string> touch(const char* what, const void* p, std::size_t bytes, bool write);

  History start_;
  std::vector<std::pair<std::uint64_t, Epoch>> kernels_;
  Epoch first_;
  int device_ = 0;
  Step* outer_ = nullptr;
};

// An earlier access that an access races with.
struct Conflict {
  bool wrote = false;  // a write; a read otherwise
  std::string by;      // what made it: "kernel NAME", or a device operation's name ("a copy")
  Epoch operation;     // and its operation
  int device = 0;
};

// How reports name a stream: "stream #3 of device 0" (numbered at its first operation).
std::string stream_name(Epoch operation, int device);

class AllocationRecords;

// One launch's part in the records.
class Launch {
 public:
  // `allocations`: those live at the launch, by base address (block_races::Launch's).
  Launch(const Place& place, const char* kernel, const std::vector<Allocation>& allocations);
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // Records an access to the word at `address` (or the byte, with `byte`) of allocations[allocation], by a
  // thread that has (`waited`) or has not yet passed its programmatic wait. Returns whether it races with
  // an earlier launch's access, and if so fills `conflict` with that access.
  bool access(std::size_t allocation, std::uintptr_t address, bool byte, bool write, bool waited,
              Conflict& conflict);

  const Place& place() const { return place_; }

 private:
  Place place_;
  std::uint32_t source_ = 0;
  std::vector<std::shared_ptr<AllocationRecords>> records_;  // by allocation
};

// Records an access by the running device operation other than a kernel (a copy, a fill, a collective, a
// product: `what`, which must outlive the records, as a string literal does) to [p, p + bytes), word by word,
// on the engine's thread. Returns the message naming the first race, if it races with an earlier access.
// Does nothing outside a Step (the check is off) and for memory that is no allocation.
std::optional<std::string> touch(const char* what, const void* p, std::size_t bytes, bool write);

// Forgets the records of the allocation at `base`, as it is freed: memory allocated there later is new.
void forget(const void* base);

}  // namespace mnistdp::emu::operation_races
