// cpu::gemm for CPUs with AVX-512F: compiled with -mavx512f -mfma, called only where best_isa() found them.
#include <immintrin.h>

#include "kernels/cpu/gemm_tiles.hpp"

namespace mnistdp::cpu {
namespace {

struct Avx512 {
  using T = __m512;
  static constexpr int kLanes = 16;
  // 24 accumulators (6 rows x 4 vectors up to 24 rows x 1), a row of B and a broadcast: at most 29 of the 32
  // registers.
  static constexpr int kAccumulators = 24;
  static constexpr int kTileVectors = 4;

  static __mmask16 lanes(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load_part(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void store_part(float* p, T v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  // vmaxps returns its second operand when either is a NaN and when both are zeros: v < 0 ? 0 : v exactly.
  // (The zero-masked form with every lane set: GCC 12 reports the plain form's undefined pass-through vector
  // as maybe-uninitialized.)
  static T relu(T v) { return _mm512_maskz_max_ps(static_cast<__mmask16>(0xFFFF), _mm512_setzero_ps(), v); }
  // mask <= 0 ? 0 : v; an ordered compare, so a NaN mask keeps v, as ref:: does.
  static T zero_where_not_positive(T mask, T v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(mask, _mm512_setzero_ps(), _CMP_LE_OQ),
                              _mm512_setzero_ps());
  }
};

}  // namespace

void gemm_avx512(const Gemm& g) {
  tiles::run<Avx512>(g);
}

}  // namespace mnistdp::cpu
