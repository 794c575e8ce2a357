#include "kernels/cuda/thrust/scratch.hpp"

#include <stdexcept>

namespace mnistdp {

char* ThrustScratch::allocate(std::ptrdiff_t bytes) {
  if (bytes < 0) throw std::invalid_argument("ThrustScratch::allocate: negative size");
  const auto wanted = static_cast<std::size_t>(bytes);
  Block* best = nullptr;
  for (Block& b : blocks_)
    if (!b.in_use && b.memory.size() >= wanted && (!best || b.memory.size() < best->memory.size())) best = &b;
  if (!best) {
    // At least one byte, so that every block has an address of its own.
    blocks_.push_back(Block{DeviceBuffer<char>(wanted > 0 ? wanted : 1), false});
    best = &blocks_.back();
  }
  best->in_use = true;
  return best->memory.data();
}

void ThrustScratch::deallocate(char* block, std::size_t /*bytes*/) noexcept {
  for (Block& b : blocks_)
    if (b.memory.data() == block) b.in_use = false;
}

std::size_t ThrustScratch::bytes() const {
  std::size_t total = 0;
  for (const Block& b : blocks_)
    total += b.memory.bytes();
  return total;
}

}  // namespace mnistdp
