// cpu::gemm in plain C++, for a CPU without AVX2 and FMA3: the same blocking with four floats as a "vector".
// The multiply and the add are rounded separately here (no FMA instruction to fuse them).
#include "kernels/cpu/gemm_tiles.hpp"

namespace mnistdp::cpu {
namespace {

struct Portable {
  struct T {
    float x[4];
  };
  static constexpr int kLanes = 4;
  static constexpr int kAccumulators = 8;
  static constexpr int kTileVectors = 2;

  static T zero() { return {}; }
  static T set1(float s) { return {{s, s, s, s}}; }
  static T load(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
  static T load_part(const float* p, int n) {
    T v{};
    for (int i = 0; i < n; ++i)
      v.x[i] = p[i];
    return v;
  }
  static void store(float* p, T v) {
    for (int i = 0; i < 4; ++i)
      p[i] = v.x[i];
  }
  static void store_part(float* p, T v, int n) {
    for (int i = 0; i < n; ++i)
      p[i] = v.x[i];
  }
  template <class F>
  static T each(T a, T b, F f) {
    for (int i = 0; i < 4; ++i)
      a.x[i] = f(a.x[i], b.x[i]);
    return a;
  }
  static T fmadd(T a, T b, T c) {
    for (int i = 0; i < 4; ++i)
      c.x[i] += a.x[i] * b.x[i];
    return c;
  }
  static T add(T a, T b) {
    return each(a, b, [](float u, float w) { return u + w; });
  }
  static T sub(T a, T b) {
    return each(a, b, [](float u, float w) { return u - w; });
  }
  static T mul(T a, T b) {
    return each(a, b, [](float u, float w) { return u * w; });
  }
  static T relu(T v) {
    return each(v, v, [](float u, float) { return u < 0.0f ? 0.0f : u; });
  }
  static T zero_where_not_positive(T mask, T v) {
    return each(mask, v, [](float m, float u) { return m <= 0.0f ? 0.0f : u; });
  }
};

}  // namespace

void gemm_portable(const Gemm& g) {
  tiles::run<Portable>(g);
}

}  // namespace mnistdp::cpu
