// The GPU tests' entry point. Without a usable CUDA device every test exits with 77, which ctest reports as
// skipped (SKIP_RETURN_CODE): a GPU test is never reported as passed when it did not run.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "tests/catch_session.hpp"

namespace {

int skip_without_device(bool listing) {
  if (listing) return -1;
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("skipped: no usable CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "no devices");
    return 77;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  return testing::run_tests(argc, argv, skip_without_device);
}
