#include "kernels/cpu/gather.hpp"

#include "kernels/cpu/isa_dispatch.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/ref/gather.hpp"

namespace mnistdp::cpu {
namespace {

void gather_normalize_portable(const std::uint8_t* images, const std::uint8_t* labels,
                               const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                               int pixels) {
  ref::gather_normalize(images, labels, indices, x, y, batch, pixels);
  if (xT != nullptr) transpose(Isa::portable, x, xT, batch, pixels);
}

}  // namespace

void gather_normalize(Isa isa, const std::uint8_t* images, const std::uint8_t* labels,
                      const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                      int pixels) {
  using Fn = void(const std::uint8_t*, const std::uint8_t*, const std::int32_t*, float*, float*,
                  std::uint8_t*, int, int);
  version<Fn>(isa, "cpu::gather_normalize",
              {MNISTDP_X86_VERSION(gather_normalize_avx512), MNISTDP_X86_VERSION(gather_normalize_avx2),
               &gather_normalize_portable})(images, labels, indices, x, xT, y, batch, pixels);
}

}  // namespace mnistdp::cpu
