#pragma once
// The device's transcendental functions as a GPU computes them, with the latitude CUDA documents: a GPU's
// expf, logf and erff are not glibc's, and CUDA promises only that each result lies within a number of ulps
// of the correctly rounded one (the CUDA C++ Programming Guide, "Mathematical Functions": 2 for expf, 1 for
// logf, 2 for erff, as the distance in ulps between the correctly rounded single-precision result and the
// returned one). glibc's
// are correctly rounded nearly always, so code that ran here on glibc's bits could hold the GPU to bits it
// does not promise; these answer anywhere within the bound instead.
//
// Each is a function of its argument, as a GPU's is: the same argument gives the same result on every call,
// every thread and every run. Which neighbour of the correctly rounded result it gives is drawn from the
// argument's bits and MNISTDP_EMU_SEED. Results a GPU gives exactly (an exact result such as expf(0) = 1 and
// logf(1) = 0, infinities, NaN, zero) and subnormal results are the correctly rounded ones; erff never
// leaves [-1, 1], erf's range, which a GPU's erff keeps too.
#include <cstdint>

namespace mnistdp::emu {

float device_expf(float x);
float device_logf(float x);
float device_erff(float x);

// The result within `max_ulps` of `correctly_rounded` that the seed and `draw` pick, never crossing zero,
// leaving the normal range or reaching infinity. `draw` is the function's salt mixed with its argument's
// bits.
float within_ulps(float correctly_rounded, int max_ulps, std::uint64_t draw);

}  // namespace mnistdp::emu
