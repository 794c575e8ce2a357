#pragma once
// The instruction-set versions of the CPU kernels that this CPU can run, for tests registered once per
// version: a version it cannot run is skipped, never passed.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "kernels/cpu/gemm.hpp"

namespace mnistdp::testing {

inline bool supported(cpu::Isa isa) {
  const cpu::Isa best = cpu::best_isa();
  return isa == cpu::Isa::portable || isa == best || (isa == cpu::Isa::avx2 && best == cpu::Isa::avx512);
}

// Exit code 77, which ctest reports as skipped, where this CPU cannot run the version.
inline void skip_unless_supported(cpu::Isa isa) {
  if (supported(isa)) return;
  WARN("this CPU cannot run the " << cpu::isa_name(isa) << " version");
  std::exit(77);
}

}  // namespace mnistdp::testing
