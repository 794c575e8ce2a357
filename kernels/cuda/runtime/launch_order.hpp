#pragma once
// How a kernel's launch is ordered after the kernel before it on its stream. No CUDA here: the replica and
// the benchmarks choose it.
namespace mnistdp::cuda {

enum class LaunchOrder {
  // The stream's own rule: the kernel begins once the kernel before has finished and its writes are visible.
  serial,
  // Programmatic dependent launch (compute capability 9.0 and newer): the kernel's blocks may be scheduled
  // while the kernel before is still running, and each waits for it to finish, its writes visible, before
  // touching memory. What this saves is the gap between the two kernels, never any of their work; the
  // results are the serial launch's to the bit. Inside a stream capture the graph gets a programmatic edge.
  programmatic,
};

}  // namespace mnistdp::cuda
