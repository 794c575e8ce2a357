#pragma once
// Which parameters a replica's momentum buffer covers: all of them, or under ZeRO-1 (Replica::sgd_step_shard)
// the one shard the replica's first sgd_step_shard names. The rules every backend keeps alike; the buffer
// itself is the replica's (host or device memory).
#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>

#include "host/model/params.hpp"

namespace mnistdp {

class MomentumShard {
 public:
  std::size_t first() const { return first_; }
  std::size_t count() const { return count_; }

  // An sgd_step_shard call's shard: true the first time, when the replica cuts its buffer down to it (keeping
  // what a resumed run loaded there); false for the same shard again. Throws for parameters outside the
  // buffer, or another shard than the first.
  bool name(std::size_t first, std::size_t count) {
    if (first > ParamLayout::kCount || count > ParamLayout::kCount - first)
      throw std::out_of_range(fmt::format("sgd_step_shard: parameters [{}, {}) outside the {} parameters",
                                          first, first + count, ParamLayout::kCount));
    if (sharded_) {
      if (first != first_ || count != count_)
        throw std::logic_error(
            fmt::format("sgd_step_shard: parameters [{}, {}), but this replica's shard is [{}, {})", first,
                        first + count, first_, first_ + count_));
      return false;
    }
    first_ = first;
    count_ = count;
    sharded_ = true;
    return true;
  }

  // sgd_step's check: the whole buffer's step is no longer this replica's once it holds a shard.
  void require_whole() const {
    if (sharded_)
      throw std::logic_error("sgd_step: this replica holds one shard's momentum (sgd_step_shard) alone");
  }

 private:
  std::size_t first_ = 0;
  std::size_t count_ = ParamLayout::kCount;
  bool sharded_ = false;
};

}  // namespace mnistdp
