#pragma once
// The order of an emulated all-reduce's sum: NCCL's ring. Its reduce-scatter splits the buffer into chunks,
// one per rank and loop; chunk c of a loop starts at the rank after c on the ring, goes round, and ends at
// rank c, each rank adding its own value to what it received. So element i's sum is
// ((x[s] + x[s+1]) + x[s+2]) + ... with s depending on i's chunk, never rank order for every element: a
// sum of three ranks or more differs in its last bits from chunk to chunk. How many elements a chunk holds
// depends on NCCL's protocol and tuning, so it is drawn from MNISTDP_EMU_SEED (16 to 32768), and no test
// can rely on one layout (docs/emulation.md, "NCCL").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "emu/src/runtime/config.hpp"

namespace mnistdp::emu::nccl {

// Elements per chunk of a ring of `ranks`, drawn from the seed.
inline std::size_t ring_chunk_elements(int ranks) {
  const std::uint64_t draw = mix(config().seed ^ 0x72696e67ull, static_cast<std::uint64_t>(ranks));
  return std::size_t{16} << (draw % 12);
}

// Calls f(begin, end, first) for each chunk [begin, end) of a buffer of `count` elements, whose sums start
// at rank `first`. As NCCL's last loop does (src/device/all_reduce.h, runRing), a remainder too short for a
// full chunk per rank is shared out evenly, in chunks of whole 16 bytes.
template <class F>
void ring_chunks(std::size_t count, int ranks, F&& f) {
  const std::size_t chunk_elements = ring_chunk_elements(ranks);
  const auto n = static_cast<std::size_t>(ranks);
  std::size_t offset = 0;
  while (offset < count) {
    const std::size_t even = ((count - offset + n - 1) / n + 3) / 4 * 4;
    const std::size_t chunk = std::min(chunk_elements, even);
    for (int c = 0; c < ranks && offset < count; ++c) {
      const std::size_t end = std::min(count, offset + chunk);
      f(offset, end, (c + 1) % ranks);
      offset = end;
    }
  }
}

// out[i - begin] = the ring's sum of in[r][i - begin] over the ranks, for the elements [begin, end) of an
// all-reduce of `count` elements. `out` may be any of the inputs.
inline void ring_sum(const std::vector<const float*>& in, std::size_t begin, std::size_t end,
                     std::size_t count, float* out) {
  const int ranks = static_cast<int>(in.size());
  ring_chunks(count, ranks, [&](std::size_t b, std::size_t e, int first) {
    b = std::max(b, begin);
    e = std::min(e, end);
    for (std::size_t i = b; i < e; ++i) {
      float acc = in[static_cast<std::size_t>(first)][i - begin];
      for (int k = 1; k < ranks; ++k)
        acc += in[static_cast<std::size_t>((first + k) % ranks)][i - begin];
      out[i - begin] = acc;
    }
  });
}

}  // namespace mnistdp::emu::nccl
