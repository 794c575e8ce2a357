// Which of cpu::gemm's versions this CPU can run, decided by its features (CPUID and what the operating
// system saves on a context switch), never by its model name, so that a CPU newer than this code is still
// served by its widest vectors.
#include "kernels/cpu/gemm.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cpu/isa_dispatch.hpp"

namespace mnistdp::cpu {

Isa best_isa() {
#if defined(MNISTDP_CPU_GEMM_X86)
  // GCC's __builtin_cpu_supports also checks that the OS enables the vector registers (XCR0).
  if (__builtin_cpu_supports("avx512f")) return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::portable;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return "AVX-512";
    case Isa::avx2:
      return "AVX2+FMA";
    case Isa::portable:
      return "portable C++";
  }
  return "unknown";
}

void gemm(Isa isa, const Gemm& g) {
  if (g.epilogue.activation != Activation::identity && g.epilogue.activation != Activation::relu)
    throw std::invalid_argument(std::string("cpu::gemm: no vector form of ") +
                                activation_name(g.epilogue.activation) + " in the epilogue");
  version<void(const Gemm&)>(
      isa, "cpu::gemm",
      {MNISTDP_X86_VERSION(gemm_avx512), MNISTDP_X86_VERSION(gemm_avx2), &gemm_portable})(g);
}

}  // namespace mnistdp::cpu
