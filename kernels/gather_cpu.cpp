#include "kernels/gather_cpu.hpp"

#include "kernels/cpu_isa_dispatch.hpp"
#include "kernels/gather.hpp"

namespace mnistdp::cpu {

void gather_normalize(Isa isa, const std::uint8_t* images, const std::uint8_t* labels,
                      const std::int32_t* indices, float* x, std::uint8_t* y, int batch, int pixels) {
  using Fn =
      void(const std::uint8_t*, const std::uint8_t*, const std::int32_t*, float*, std::uint8_t*, int, int);
  version<Fn>(isa, "cpu::gather_normalize",
              {MNISTDP_X86_VERSION(gather_normalize_avx512), MNISTDP_X86_VERSION(gather_normalize_avx2),
               &ref::gather_normalize})(images, labels, indices, x, y, batch, pixels);
}

}  // namespace mnistdp::cpu
