#pragma once
// What is ordered before a point of the emulated devices' work, for the check of races between operations
// (operation_races.hpp): a vector clock over the streams. Every stream is a lane, and its operations are
// numbered in stream order, so one number a lane says which of its operations happen before: the ones up to
// it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mnistdp::emu {

// One operation: the `seq`-th of the stream whose lane is `lane`.
struct Epoch {
  std::uint32_t lane = 0;  // 0: none
  std::uint64_t seq = 0;
  bool operator==(const Epoch& other) const { return lane == other.lane && seq == other.seq; }
};

class History {
 public:
  bool covers(Epoch e) const { return e.lane < seen_.size() && seen_[e.lane] >= e.seq; }
  void add(Epoch e) {
    if (e.lane >= seen_.size()) seen_.resize(e.lane + std::size_t{1}, 0);
    seen_[e.lane] = std::max(seen_[e.lane], e.seq);
  }
  void join(const History& other) {
    if (other.seen_.size() > seen_.size()) seen_.resize(other.seen_.size(), 0);
    for (std::size_t lane = 0; lane < other.seen_.size(); ++lane)
      seen_[lane] = std::max(seen_[lane], other.seen_[lane]);
  }

 private:
  std::vector<std::uint64_t> seen_;  // by lane: the last operation ordered before
};

}  // namespace mnistdp::emu
