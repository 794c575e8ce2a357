// cpu::gather_normalize for CPUs with AVX-512F: compiled with -mavx512f, called only where best_isa() found
// them.
#include "kernels/cpu/gather.hpp"
#include "kernels/cpu/vector_blocks.hpp"

namespace mnistdp::cpu {

void gather_normalize_avx512(const std::uint8_t* images, const std::uint8_t* labels,
                             const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                             int pixels) {
  gather_normalize_blocks<Avx512Block>(images, labels, indices, x, xT, y, batch, pixels);
}

}  // namespace mnistdp::cpu
