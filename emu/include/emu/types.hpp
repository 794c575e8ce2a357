#pragma once
// The CUDA vector and launch-shape types the project uses, as plain structs with CUDA's layouts and
// alignments.
#include <cstddef>

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(4) uchar4 {
  unsigned char x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};

inline constexpr float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
inline constexpr float2 make_float2(float x, float y) {
  return {x, y};
}
inline constexpr uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) {
  return {x, y, z, w};
}
