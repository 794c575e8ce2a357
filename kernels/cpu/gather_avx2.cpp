// cpu::gather_normalize for CPUs with AVX2 and FMA: compiled with -mavx2 -mfma, called only where best_isa()
// found them.
#include "kernels/cpu/gather.hpp"
#include "kernels/cpu/vector_blocks.hpp"

namespace mnistdp::cpu {

void gather_normalize_avx2(const std::uint8_t* images, const std::uint8_t* labels,
                           const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                           int pixels) {
  gather_normalize_blocks<Avx2Block>(images, labels, indices, x, xT, y, batch, pixels);
}

}  // namespace mnistdp::cpu
