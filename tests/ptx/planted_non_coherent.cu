// A kernel that breaks the read-only cache's contract on purpose, for check_ptx.py's own test
// (test_check_ptx.py): each thread doubles its element of `p` and then reads its neighbour's, which another
// thread of the launch writes. Through __ldg (kLdg) the read goes through the non-coherent cache, which may
// serve the value from before the neighbour's write: the check must refuse it. The twin reads with a plain
// load and must pass. Not part of any program.
#include <cuda_runtime.h>

namespace mnistdp::ptx_probe {

template <bool kLdg>
__global__ void reads_what_it_writes_kernel(float* p,  // [n + 1]
                                            int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = 2.0f * p[i];
  __syncthreads();
  if (i < n) p[i] += kLdg ? __ldg(&p[i + 1]) : p[i + 1];
}

template __global__ void reads_what_it_writes_kernel<true>(float*, int);
template __global__ void reads_what_it_writes_kernel<false>(float*, int);

}  // namespace mnistdp::ptx_probe
