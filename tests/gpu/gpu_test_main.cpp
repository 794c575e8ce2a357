// The GPU tests' entry point. Without a usable CUDA device every test exits with 77, which ctest reports as
// skipped (SKIP_RETURN_CODE): a GPU test is never reported as passed when it did not run.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing =
      config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters;
  if (!listing) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      std::printf("skipped: no usable CUDA device (%s)\n",
                  status != cudaSuccess ? cudaGetErrorString(status) : "no devices");
      return 77;
    }
  }
  return session.run();
}
