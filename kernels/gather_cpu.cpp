#include "kernels/gather_cpu.hpp"

#include <stdexcept>

#include "kernels/gather.hpp"

namespace mnistdp::cpu {

void gather_normalize(Isa isa, const std::uint8_t* images, const std::uint8_t* labels,
                      const std::int32_t* indices, float* x, std::uint8_t* y, int batch, int pixels) {
  switch (isa) {
#if defined(MNISTDP_CPU_GEMM_X86)
    case Isa::avx512:
      return gather_normalize_avx512(images, labels, indices, x, y, batch, pixels);
    case Isa::avx2:
      return gather_normalize_avx2(images, labels, indices, x, y, batch, pixels);
#else
    case Isa::avx512:
    case Isa::avx2:
      throw std::invalid_argument("cpu::gather_normalize: this build has no x86-64 versions");
#endif
    case Isa::portable:
      return ref::gather_normalize(images, labels, indices, x, y, batch, pixels);
  }
  throw std::invalid_argument("cpu::gather_normalize: unknown instruction set");
}

}  // namespace mnistdp::cpu
