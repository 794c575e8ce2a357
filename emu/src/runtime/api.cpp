// The CUDA runtime API over the engine (engine.hpp) and the memory registry (memory.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"
#include "emu/src/runtime/memory.hpp"
#include "emu/src/runtime/resources.hpp"

namespace mnistdp::emu {
cudaError_t take_last_error(bool reset);
}

using mnistdp::emu::Dependency;
using mnistdp::emu::Engine;
using mnistdp::emu::kDeviceMemory;
using mnistdp::emu::Op;
using mnistdp::emu::record;

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

Engine& engine() {
  return Engine::get();
}

bool valid_device(int d) {
  return d >= 0 && d < static_cast<int>(engine().devices.size());
}

cudaError_t invalid(cudaError_t code, const std::string& message) {
  engine().set_detail(code, "emulated CUDA: " + message);
  return record(code);
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// Where a pointer of a copy lies: in a device allocation (its device), in pinned host memory, or elsewhere
// on the host. `whole` is false when [p, p + bytes) runs past the allocation's end.
struct Place {
  int device = -1;
  bool pinned = false;
  bool whole = true;
};

Place place_of(const void* p, std::size_t bytes) {
  Place where;
  bool whole = true;
  if (auto a = mnistdp::emu::find_allocation(p, bytes, &whole)) {
    where.device = a->device;
    where.pinned = a->device < 0;
    where.whole = whole;
  }
  return where;
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault:
      return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// Checks a copy's pointers against its kind, as the runtime does, and (what the runtime cannot always do)
// that device ranges lie within one allocation.
cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, Place& d,
                       Place& s) {
  d = place_of(dst, bytes);
  s = place_of(src, bytes);
  const bool dst_dev = d.device >= 0;
  const bool src_dev = s.device >= 0;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_dev && src_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyDefault:
      ok = true;
      break;
    default:
      return invalid(cudaErrorInvalidMemcpyDirection, "a copy of an unknown kind");
  }
  if (!ok) {
    return invalid(cudaErrorInvalidValue,
                   std::string(kind_name(kind)) + " from " + (src_dev ? "device" : "host") + " memory at " +
                       hex(src) + " to " + (dst_dev ? "device" : "host") + " memory at " + hex(dst));
  }
  if ((dst_dev && !d.whole) || (src_dev && !s.whole)) {
    return invalid(cudaErrorInvalidValue,
                   "a copy of " + std::to_string(bytes) + " bytes runs past the end of the " +
                       (dst_dev && !d.whole ? "destination's" : "source's") + " device allocation");
  }
  return cudaSuccess;
}

cudaError_t unavailable(int device) {
  return invalid(cudaErrorDevicesUnavailable,
                 "device " + std::to_string(device) + " does not answer (MNISTDP_EMU_FAILING_DEVICE)");
}

cudaError_t fault_of(int device) {
  return record(engine().device_fault(device));
}

cudaError_t wait_and_report(CUstream_st* s) {
  engine().wait_stream(s);
  return fault_of(s->device);
}

// A copy on a stream; `sync` when the call returns only after the copy (pageable host destinations, and
// cudaMemcpy itself).
cudaError_t copy_on(CUstream_st* s, void* dst, const void* src, std::size_t bytes, const Place& d,
                    const Place& sp, bool sync) {
  if (const cudaError_t f = engine().device_fault(s->device); f != cudaSuccess) return record(f);
  if (bytes == 0) return cudaSuccess;
  Op op;
  op.what = "a copy of " + std::to_string(bytes) + " bytes";
  if (sp.device < 0 && !sp.pinned) {
    // Pageable source: staged now, as the runtime stages it before the call returns.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                           static_cast<const std::byte*>(src) + bytes);
    op.run = [dst, staged] {
      mnistdp::emu::device_operation_touches("a copy", dst, staged->size(), true);
      std::memcpy(dst, staged->data(), staged->size());
    };
  } else {
    op.run = [dst, src, bytes] {
      mnistdp::emu::device_operation_touches("a copy", src, bytes, false);
      mnistdp::emu::device_operation_touches("a copy", dst, bytes, true);
      std::memmove(dst, src, bytes);
    };
  }
  if (const cudaError_t e = engine().enqueue(s, std::move(op)); e != cudaSuccess) return record(e);
  if (d.device >= 0 && sp.device < 0) ++engine().host_to_device_copies;
  const bool pageable_dst = d.device < 0 && !d.pinned;
  if (sync || (pageable_dst && !s->capture)) return wait_and_report(s);
  return cudaSuccess;
}

cudaError_t fill_on(CUstream_st* s, void* ptr, std::size_t pitch, int value, std::size_t width,
                    std::size_t height, bool sync) {
  const std::size_t span = height == 0 ? 0 : pitch * (height - 1) + width;
  const Place p = place_of(ptr, span);
  if (p.device < 0) return invalid(cudaErrorInvalidValue, "cudaMemset of host memory at " + hex(ptr));
  if (!p.whole)
    return invalid(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(span) +
                                              " bytes runs past the end of its device allocation");
  if (const cudaError_t f = engine().device_fault(s->device); f != cudaSuccess) return record(f);
  if (span == 0) return cudaSuccess;
  Op op;
  op.what = "a memset of " + std::to_string(span) + " bytes";
  op.run = [ptr, pitch, value, width, height] {
    for (std::size_t r = 0; r < height; ++r) {
      mnistdp::emu::device_operation_touches("a memset", static_cast<std::byte*>(ptr) + r * pitch, width,
                                             true);
      std::memset(static_cast<std::byte*>(ptr) + r * pitch, value, width);
    }
  };
  if (const cudaError_t e = engine().enqueue(s, std::move(op)); e != cudaSuccess) return record(e);
  if (sync) return wait_and_report(s);
  return cudaSuccess;
}

bool known_stream(CUstream_st* s) {
  std::lock_guard lock(engine().mutex);
  for (auto& d : engine().devices)
    if (std::find(d.streams.begin(), d.streams.end(), s) != d.streams.end()) return true;
  return false;
}

}  // namespace

std::uint64_t mnistdp::emu::host_to_device_copies() {
  return engine().host_to_device_copies.load();
}

// ---- errors and versions -------------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define MNISTDP_EMU_NAME(e) \
  case e:                   \
    return #e;
    MNISTDP_EMU_NAME(cudaSuccess)
    MNISTDP_EMU_NAME(cudaErrorInvalidValue)
    MNISTDP_EMU_NAME(cudaErrorMemoryAllocation)
    MNISTDP_EMU_NAME(cudaErrorInitializationError)
    MNISTDP_EMU_NAME(cudaErrorInvalidConfiguration)
    MNISTDP_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    MNISTDP_EMU_NAME(cudaErrorInsufficientDriver)
    MNISTDP_EMU_NAME(cudaErrorDevicesUnavailable)
    MNISTDP_EMU_NAME(cudaErrorInvalidDeviceFunction)
    MNISTDP_EMU_NAME(cudaErrorNoDevice)
    MNISTDP_EMU_NAME(cudaErrorInvalidDevice)
    MNISTDP_EMU_NAME(cudaErrorInvalidResourceHandle)
    MNISTDP_EMU_NAME(cudaErrorNotReady)
    MNISTDP_EMU_NAME(cudaErrorIllegalAddress)
    MNISTDP_EMU_NAME(cudaErrorLaunchOutOfResources)
    MNISTDP_EMU_NAME(cudaErrorPeerAccessAlreadyEnabled)
    MNISTDP_EMU_NAME(cudaErrorIllegalInstruction)
    MNISTDP_EMU_NAME(cudaErrorMisalignedAddress)
    MNISTDP_EMU_NAME(cudaErrorLaunchFailure)
    MNISTDP_EMU_NAME(cudaErrorCooperativeLaunchTooLarge)
    MNISTDP_EMU_NAME(cudaErrorNotSupported)
    MNISTDP_EMU_NAME(cudaErrorStreamCaptureUnsupported)
    MNISTDP_EMU_NAME(cudaErrorStreamCaptureInvalidated)
    MNISTDP_EMU_NAME(cudaErrorStreamCaptureIsolation)
    MNISTDP_EMU_NAME(cudaErrorStreamCaptureImplicit)
    MNISTDP_EMU_NAME(cudaErrorStreamCaptureWrongThread)
    MNISTDP_EMU_NAME(cudaErrorUnknown)
#undef MNISTDP_EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  if (error == cudaErrorNoDevice)
    return "no CUDA-capable device is detected (emulated: MNISTDP_EMU_DEVICES=0)";
  if (const char* detail = engine().detail(error)) return detail;
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorCooperativeLaunchTooLarge:
      return "too many blocks in cooperative launch";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    default:
      return "emulated CUDA error";
  }
}

cudaError_t cudaGetLastError() {
  return mnistdp::emu::take_last_error(true);
}

cudaError_t cudaPeekAtLastError() {
  return mnistdp::emu::take_last_error(false);
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  return cudaDriverGetVersion(version);
}

// ---- devices -------------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record(cudaErrorInvalidValue);
  *count = static_cast<int>(engine().devices.size());
  if (*count == 0) return record(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return record(cudaErrorInvalidValue);
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  *device = engine().current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  if (device == mnistdp::emu::config().failing_device) return unavailable(device);
  return record(engine().set_current_device(device));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return record(cudaErrorInvalidValue);
  if (!valid_device(device)) return record(cudaErrorInvalidDevice);
  if (device == mnistdp::emu::config().failing_device) return unavailable(device);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "emulated CUDA device (CPU)");
  prop->totalGlobalMem = kDeviceMemory;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = mnistdp::emu::config().sms;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->cooperativeLaunch = 1;
  prop->pciBusID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return record(cudaErrorInvalidValue);
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      return cudaSuccess;
    case cudaDevAttrCooperativeLaunch:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrClockRate:
    case cudaDevAttrMemoryClockRate:
      // An emulated device has no clock worth reporting: a figure derived from one would be made up.
      return invalid(cudaErrorNotSupported, "an emulated device has no clock rate");
  }
  return invalid(cudaErrorInvalidValue, "a device attribute that the emulation does not know");
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (!bus_id || length <= 0) return record(cudaErrorInvalidValue);
  if (!valid_device(device)) return record(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<std::size_t>(length), "emulated:%02d", device);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  if (engine().unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  const int d = engine().current_device();
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard lock(engine().mutex);
    streams = engine().devices[static_cast<std::size_t>(d)].streams;
  }
  for (CUstream_st* s : streams)
    engine().wait_stream(s);
  return fault_of(d);
}

cudaError_t cudaDeviceReset() {
  const cudaError_t e = cudaDeviceSynchronize();
  std::lock_guard lock(engine().mutex);
  auto& d = engine().devices[static_cast<std::size_t>(engine().current_device())];
  d.fault = cudaSuccess;
  d.fault_message.clear();
  mnistdp::emu::resources::forget_attributes(engine().current_device());
  return e == cudaErrorStreamCaptureUnsupported ? e : cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return record(cudaErrorInvalidValue);
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  std::lock_guard lock(engine().mutex);
  const std::size_t used = engine().devices[static_cast<std::size_t>(engine().current_device())].allocated;
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - std::min(used, kDeviceMemory);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  if (!can_access) return record(cudaErrorInvalidValue);
  if (!valid_device(device) || !valid_device(peer_device)) return record(cudaErrorInvalidDevice);
  *can_access = device != peer_device ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  if (flags != 0) return record(cudaErrorInvalidValue);
  if (!valid_device(peer_device) || peer_device == engine().current_device())
    return record(cudaErrorInvalidDevice);
  std::lock_guard lock(engine().mutex);
  auto& enabled = engine().devices[static_cast<std::size_t>(engine().current_device())].peer_enabled;
  if (enabled[static_cast<std::size_t>(peer_device)]) return record(cudaErrorPeerAccessAlreadyEnabled);
  enabled[static_cast<std::size_t>(peer_device)] = true;
  return cudaSuccess;
}

// ---- copies and fills ----------------------------------------------------------------------------------

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  if (engine().unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  Place d, s;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind, d, s); e != cudaSuccess) return e;
  return copy_on(engine().resolve(nullptr), dst, src, bytes, d, s, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  Place d, s;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind, d, s); e != cudaSuccess) return e;
  return copy_on(engine().resolve(stream), dst, src, bytes, d, s, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                                cudaStream_t stream) {
  Place d, s;
  if (const cudaError_t e = check_copy(dst, src, bytes, cudaMemcpyDeviceToDevice, d, s); e != cudaSuccess)
    return e;
  if (d.device != dst_device || s.device != src_device)
    return invalid(cudaErrorInvalidValue, "cudaMemcpyPeerAsync with pointers of other devices than named");
  return copy_on(engine().resolve(stream), dst, src, bytes, d, s, false);
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  if (engine().unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  // Asynchronous on the legacy stream, as on a GPU for device memory: the work that follows on a
  // non-blocking stream is not ordered after it.
  return fill_on(engine().resolve(nullptr), ptr, bytes, value, bytes, 1, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  return fill_on(engine().resolve(stream), ptr, bytes, value, bytes, 1, false);
}

cudaError_t cudaMemset2DAsync(void* ptr, std::size_t pitch, int value, std::size_t width, std::size_t height,
                              cudaStream_t stream) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  if (width > pitch) return record(cudaErrorInvalidValue);
  return fill_on(engine().resolve(stream), ptr, pitch, value, width, height, false);
}

// ---- streams -------------------------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream || (flags & ~1u) != 0) return record(cudaErrorInvalidValue);
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  auto* s = new CUstream_st;
  s->device = engine().current_device();
  s->nonblocking = (flags & cudaStreamNonBlocking) != 0;
  std::lock_guard lock(engine().mutex);
  engine().devices[static_cast<std::size_t>(s->device)].streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream || stream == cudaStreamLegacy || !known_stream(stream))
    return record(cudaErrorInvalidResourceHandle);
  // The runtime lets the stream's work finish after the call; waiting for it here is the same, observably.
  engine().wait_stream(stream);
  {
    std::lock_guard lock(engine().mutex);
    auto& streams = engine().devices[static_cast<std::size_t>(stream->device)].streams;
    streams.erase(std::find(streams.begin(), streams.end(), stream));
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  CUstream_st* s = engine().resolve(stream);
  if (engine().unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  return wait_and_report(s);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (!fn) return record(cudaErrorInvalidValue);
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  CUstream_st* s = engine().resolve(stream);
  if (const cudaError_t f = engine().device_fault(s->device); f != cudaSuccess) return record(f);
  Op op;
  op.what = "a host function";
  op.host_function = true;
  op.run = [fn, user_data] { fn(user_data); };
  if (const cudaError_t e = engine().enqueue(s, std::move(op)); e != cudaSuccess) return record(e);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  CUstream_st* s = engine().resolve(stream);
  if (s->capture) return record(cudaErrorStreamCaptureUnsupported);
  // A query releases the queued work, as a wait does, but returns at once.
  const bool done = engine().reached([s] { return Engine::all_enqueued(s); }, Engine::HostWait::query);
  if (const cudaError_t f = engine().device_fault(s->device); f != cudaSuccess) return record(f);
  return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (!event || flags != 0) return record(cudaErrorInvalidValue);
  CUstream_st* s = engine().resolve(stream);
  std::uint64_t recorded = 0;
  CUstream_st* captured_in = nullptr;
  std::shared_ptr<const mnistdp::emu::race::Token> record_done;
  {
    std::lock_guard lock(engine().mutex);
    recorded = event->recorded;
    captured_in = event->captured_in;
    record_done = event->last_record;
  }
  if (captured_in) {
    if (captured_in == s) return cudaSuccess;  // already in the stream's order
    return invalid(cudaErrorStreamCaptureUnsupported,
                   "joining another stream to a capture through an event is not emulated");
  }
  if (s->capture) {
    // A graph cannot wait for work outside it: the runtime refuses this as a violation of the capture's
    // isolation.
    return invalid(cudaErrorStreamCaptureIsolation, "a capture waits for an event recorded outside it");
  }
  if (recorded == 0) return cudaSuccess;  // never recorded: nothing to wait for
  Op op;
  op.what = "a wait for an event";
  op.after.push_back(Dependency{event->completed, recorded, record_done});
  return record(engine().enqueue(s, std::move(op)));
}

// ---- events --------------------------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event || (flags & ~3u) != 0) return record(cudaErrorInvalidValue);
  if (engine().devices.empty()) return record(cudaErrorNoDevice);
  auto* e = new CUevent_st;
  e->device = engine().current_device();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  // A record still queued holds the counter it completes; the event itself may go.
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  CUstream_st* s = engine().resolve(stream);
  // An event belongs to the device it was created on, and is recorded on that device's streams alone (a
  // stream of another device may wait on it, cudaStreamWaitEvent).
  if (event->device != s->device) {
    return invalid(cudaErrorInvalidResourceHandle,
                   "cudaEventRecord: an event of device " + std::to_string(event->device) +
                       " recorded on a stream of device " + std::to_string(s->device));
  }
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(engine().mutex);
    if (s->capture) {
      event->captured_in = s;
      return cudaSuccess;
    }
    event->captured_in = nullptr;
    generation = ++event->recorded;
  }
  Op op;
  op.what = "an event record";
  {
    std::lock_guard lock(engine().mutex);
    event->last_record = op.done;
  }
  auto counter = event->completed;
  op.run = [event, counter, generation] {
    // Runs on the engine thread; the engine's lock orders it with the host's reads of the counter. For the
    // race checks, the record's token orders (sanitizer.hpp), not this lock, and the counter and the
    // timestamp (clock_gettime writes its result on the engine's stack) are the emulator's, which records
    // on unordered streams would otherwise race on.
    const mnistdp::emu::race::IgnoreSync bookkeeping;
    const mnistdp::emu::race::IgnoreAccesses unseen;
    std::lock_guard lock(engine().mutex);
    counter->value = std::max(counter->value, generation);
    event->completed_ms = now_ms();
  };
  return record(engine().enqueue(s, std::move(op)));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  if (engine().unsafe_during_capture()) return record(cudaErrorStreamCaptureUnsupported);
  engine().reached([event] { return Engine::latest_record(event); }, Engine::HostWait::block);
  return fault_of(event->device);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  const bool done =
      engine().reached([event] { return Engine::latest_record(event); }, Engine::HostWait::query);
  return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return record(cudaErrorInvalidValue);
  if (!start->timing || !end->timing) return record(cudaErrorInvalidResourceHandle);
  // Two clocks are not one: events of two devices have no time between them.
  if (start->device != end->device) {
    return invalid(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: events of devices " +
                                                       std::to_string(start->device) + " and " +
                                                       std::to_string(end->device));
  }
  std::lock_guard lock(engine().mutex);
  // Never recorded: an invalid handle, as the runtime says, not "not ready" (which a poll would wait on).
  if (start->recorded == 0 || end->recorded == 0) return record(cudaErrorInvalidResourceHandle);
  if (start->completed->value < start->recorded || end->completed->value < end->recorded)
    return record(cudaErrorNotReady);
  // Host time between the two records' execution on the engine: an emulated figure, never a GPU time.
  *ms = static_cast<float>(end->completed_ms - start->completed_ms);
  return cudaSuccess;
}

// ---- graphs --------------------------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  CUstream_st* s = engine().resolve(stream);
  if (s->legacy) return invalid(cudaErrorStreamCaptureUnsupported, "capture of the legacy default stream");
  std::lock_guard lock(engine().mutex);
  if (s->capture) return record(cudaErrorIllegalInstruction);
  s->capture = std::make_unique<CUgraph_st>();
  s->capture_mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->capture_invalidated = false;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return record(cudaErrorInvalidValue);
  CUstream_st* s = engine().resolve(stream);
  std::lock_guard lock(engine().mutex);
  if (!s->capture) return record(cudaErrorIllegalInstruction);
  if (s->capture_thread != std::this_thread::get_id() && s->capture_mode != cudaStreamCaptureModeRelaxed)
    return record(cudaErrorStreamCaptureWrongThread);
  std::unique_ptr<CUgraph_st> built = std::move(s->capture);
  *graph = nullptr;
  if (s->capture_invalidated) {
    s->capture_invalidated = false;
    return record(cudaErrorStreamCaptureInvalidated);
  }
  *graph = built.release();
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count) {
  if (!graph || !count) return record(cudaErrorInvalidValue);
  if (nodes) return invalid(cudaErrorNotSupported, "listing a graph's nodes (only their count is emulated)");
  *count = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec || !graph || flags != 0) return record(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st;
  e->nodes = graph->nodes;
  e->device = engine().current_device();
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return record(cudaErrorInvalidValue);
  static_cast<void>(stream);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return record(cudaErrorInvalidValue);
  CUstream_st* s = engine().resolve(stream);
  if (s->device != exec->device)
    return invalid(cudaErrorInvalidValue,
                   "a graph launched on a stream of another device than it was made on");
  if (const cudaError_t f = engine().device_fault(s->device); f != cudaSuccess) return record(f);
  // The nodes in their captured order: a capture of one stream is a chain, and its programmatic edges
  // overlap as the same launches on a stream do (engine.cpp), but never with work outside the graph.
  static std::atomic<std::uint64_t> graph_launches{0};
  const std::uint64_t launch = graph_launches.fetch_add(1, std::memory_order_relaxed) + 1;
  for (const auto& node : exec->nodes) {
    Op op;
    op.what = node.what;
    op.run = node.run;
    op.host_function = node.host_function;
    op.kernel = node.kernel;
    op.programmatic = node.programmatic;
    op.graph_launch = launch;
    if (const cudaError_t e = engine().enqueue(s, std::move(op)); e != cudaSuccess) return record(e);
  }
  return cudaSuccess;
}
