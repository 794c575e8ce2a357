// cpu::gemm for CPUs with AVX2 and FMA3: compiled with -mavx2 -mfma, called only where best_isa() found them.
#include <immintrin.h>

#include "kernels/cpu/gemm_tiles.hpp"

namespace mnistdp::cpu {
namespace {

struct Avx2 {
  using T = __m256;
  static constexpr int kLanes = 8;
  // 12 accumulators (6 rows x 2 vectors or 12 x 1), a row of B and a broadcast: at most 15 of the 16
  // registers.
  static constexpr int kAccumulators = 12;
  static constexpr int kTileVectors = 2;

  static __m256i lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T load_part(const float* p, int n) { return _mm256_maskload_ps(p, lanes(n)); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void store_part(float* p, T v, int n) { _mm256_maskstore_ps(p, lanes(n), v); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  // vmaxps returns its second operand when either is a NaN and when both are zeros: v < 0 ? 0 : v exactly.
  static T relu(T v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }
  // mask <= 0 ? 0 : v; an ordered compare, so a NaN mask keeps v, as ref:: does.
  static T zero_where_not_positive(T mask, T v) {
    return _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(mask, _mm256_setzero_ps(), _CMP_LE_OQ));
  }
};

}  // namespace

void gemm_avx2(const Gemm& g) {
  tiles::run<Avx2>(g);
}

}  // namespace mnistdp::cpu
