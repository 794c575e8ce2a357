#pragma once
// Host code of the emulated build that stands in for device work of the GPU build (the CUDA path's Thrust
// algorithms, which run on Thrust's host system here): device memory, closed to the host's threads outside
// the emulated devices' operations (docs/emulation.md, "Address spaces"), is open to them while one lives.
namespace mnistdp::emu {

class DeviceWork {
 public:
  DeviceWork();
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};

}  // namespace mnistdp::emu
