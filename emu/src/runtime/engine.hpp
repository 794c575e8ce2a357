#pragma once
// The emulated devices' work: every stream is an in-order queue of operations, and one engine thread runs
// them. Nothing runs when it is enqueued: operations wait until a host thread waits for something (a
// synchronisation, a query, a synchronous copy), and then the engine takes the ready operations in the
// configured order (the adversarial order runs the latest-enqueued ready operation first, so that a missing
// dependency between streams shows every time). One engine thread keeps the order reproducible; a
// cooperative launch runs its blocks on threads of their own.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "emu/runtime.hpp"
#include "emu/src/checks/block_races.hpp"
#include "emu/src/checks/sanitizer.hpp"
#include "emu/src/runtime/history.hpp"

namespace mnistdp::emu {

// A failure inside an operation (a kernel's misuse of a barrier, an out-of-bounds store...): the device's
// error becomes sticky, as a GPU's does after a fault, and every later call on it returns `code`.
struct Fault : std::runtime_error {
  Fault(cudaError_t c, const std::string& message) : std::runtime_error(message), code(c) {}
  cudaError_t code;
};

// A count that operations wait on: a stream's completed operations, an event's completed records.
struct Counter {
  std::uint64_t value = 0;
};

struct Dependency {
  std::shared_ptr<Counter> counter;
  std::uint64_t at_least = 0;
  std::shared_ptr<const race::Token> done;  // released by the operation that brings `counter` to `at_least`
};

// A device operation's access (a copy's, a fill's, a collective's, a product's: `what`, a string literal) to
// [p, p + bytes), for the check of races between operations (operation_races.hpp): throws Fault when it races
// with an earlier access. Nothing when the check is off.
inline void device_operation_touches(const char* what, const void* p, std::size_t bytes, bool write) {
  if (std::optional<std::string> race = operation_races::touch(what, p, bytes, write))
    throw Fault(cudaErrorLaunchFailure, *race);
}

struct Collective;

// A kernel launch kept whole, so that the engine can run it together with the programmatic launches queued
// right behind it on its stream (run_programmatic_chain).
struct KernelLaunch {
  LaunchSpec spec;
  std::shared_ptr<const std::function<void()>> body;  // called by each emulated thread
  int device = 0;
  std::uint64_t number = 0;  // the launch's place among all launches, which seeds its adversarial order
};

// Runs a kernel followed by programmatic launches of the next ones, overlapping as a GPU may overlap them
// (config.hpp, MNISTDP_EMU_PDL; launch.cpp). Throws Fault.
void run_programmatic_chain(const std::vector<std::shared_ptr<const KernelLaunch>>& chain);

struct Op {
  std::string what;                            // for messages: "kernel gemm_tiled_kernel<false, true>"
  std::function<void()> run;                   // on the engine thread, outside the lock; may throw Fault
  std::vector<Dependency> after;               // besides the stream's order
  std::shared_ptr<Collective> collective;      // an NCCL call: runs with its peers' calls, all at their heads
  std::shared_ptr<const KernelLaunch> kernel;  // a kernel launch: what `run` runs
  bool host_function = false;                  // cudaLaunchHostFunc's: runs as host code
  // A kernel launched programmatically after the operation before it in its stream, which may start once
  // that operation, a kernel of the same `graph_launch`, has triggered (run_programmatic_chain).
  bool programmatic = false;
  std::uint64_t graph_launch = 0;  // the graph launch it replays a node of; 0: none
  std::uint64_t id = 0;            // global enqueue order
  std::uint64_t seq = 0;           // position in its stream
  int device = 0;
  // The race checks (sanitizer.hpp), and the check of races between operations (operation_races.hpp, whose
  // history the token holds): the enqueuing host's history and then this operation's, for whatever comes
  // after it; and the operation before it in its stream. Null when neither check is on.
  std::shared_ptr<const race::Token> done =
      race::kEnabled || block_races::wanted() ? std::make_shared<const race::Token>() : nullptr;
  std::shared_ptr<const race::Token> previous;
};

// The ops of one collective call, one per rank; `run` executes once all of them are at their streams' heads.
struct Collective {
  int ranks = 0;
  std::vector<CUstream_st*> streams;  // by rank, filled as the ranks enqueue
  std::vector<std::uint64_t> seqs;
  int joined = 0;
  std::function<void()> run;
};

// A captured operation. A kernel node keeps its launch whole, and `programmatic` is the programmatic edge
// from the node before, a kernel too (cudaGraphDependencyTypeProgrammatic, from the port
// cudaGraphKernelNodePortProgrammatic): what the capture makes of a launch with the programmatic stream
// serialization attribute right after a kernel of the same capture. A replay keeps the edge.
struct GraphNode {
  std::string what;
  std::function<void()> run;
  std::shared_ptr<const KernelLaunch> kernel;
  bool programmatic = false;
  bool host_function = false;  // Op::host_function
};

}  // namespace mnistdp::emu

struct CUgraph_st {
  std::vector<mnistdp::emu::GraphNode> nodes;
};

struct CUgraphExec_st {
  std::vector<mnistdp::emu::GraphNode> nodes;
  int device = 0;
};

struct CUstream_st {
  int device = 0;
  bool legacy = false;       // the device's legacy default stream
  bool nonblocking = false;  // created with cudaStreamNonBlocking: no implicit order with the legacy stream
  std::deque<mnistdp::emu::Op> queue;
  std::shared_ptr<mnistdp::emu::Counter> completed = std::make_shared<mnistdp::emu::Counter>();
  std::uint64_t enqueued = 0;
  std::uint32_t lane = 0;  // the check of races between operations' name for it (history.hpp); 0: none yet
  std::shared_ptr<const mnistdp::emu::race::Token> last_done;  // of the operation enqueued last
  // While capturing: the graph being built, the mode, the capturing thread, and whether an illegal call
  // has invalidated the capture.
  std::unique_ptr<CUgraph_st> capture;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  bool capture_invalidated = false;
};

struct CUevent_st {
  int device = 0;
  bool timing = true;
  std::uint64_t recorded = 0;  // records issued
  std::shared_ptr<mnistdp::emu::Counter> completed = std::make_shared<mnistdp::emu::Counter>();
  double completed_ms = 0.0;  // host time at the last completed record (emulated, never a GPU time)
  std::shared_ptr<const mnistdp::emu::race::Token> last_record;  // the done token of the latest record
  CUstream_st* captured_in = nullptr;                            // recorded during a capture of this stream
};

namespace mnistdp::emu {

struct Device {
  int index = 0;
  std::unique_ptr<CUstream_st> legacy;
  std::vector<CUstream_st*> streams;  // the legacy stream first
  cudaError_t fault = cudaSuccess;
  std::string fault_message;
  std::size_t allocated = 0;
  std::vector<bool> peer_enabled;
};

class Engine {
 public:
  static Engine& get();

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Device> devices;
  std::atomic<std::uint64_t> host_to_device_copies{0};  // mnistdp::emu::host_to_device_copies()

  // The stream an API call means: nullptr and cudaStreamLegacy are the current device's legacy stream.
  CUstream_st* resolve(cudaStream_t stream);
  int current_device() const;
  cudaError_t set_current_device(int device);

  // Enqueues on `stream` (or appends to its capture). Returns an error for a capture that refuses the op.
  cudaError_t enqueue(CUstream_st* stream, Op op);
  // Blocks the calling host thread until done() holds, with every enqueued operation released meanwhile.
  // done() runs under the engine's lock.
  void wait(const std::function<bool()>& done);
  // A host's wait for `counter` to reach `target` (a stream's completed operations, an event's records),
  // with the token of the operation that brings it there (null outside the race checks).
  struct Completion {
    std::shared_ptr<Counter> counter;
    std::uint64_t target = 0;
    std::shared_ptr<const race::Token> done;
  };
  enum class HostWait { block, query };
  // `completion`, read under the engine's lock, says what to wait for: `block` waits until it is reached,
  // `query` releases the queued work and only looks. Returns whether it is reached; if so, the calling
  // thread has the history of the operation that reached it (the race checks).
  bool reached(const std::function<Completion()>& completion, HostWait how);
  // Everything enqueued on `stream` so far; the latest record of `event`. Read under the engine's lock.
  static Completion all_enqueued(const CUstream_st* stream) {
    return Completion{stream->completed, stream->enqueued, stream->last_done};
  }
  static Completion latest_record(const CUevent_st* event) {
    return Completion{event->completed, event->recorded, event->last_record};
  }
  // Waits for everything enqueued on `stream` so far; the calling thread then has its history.
  void wait_stream(CUstream_st* stream);

  // The device's sticky fault, or cudaSuccess.
  cudaError_t device_fault(int device);

  // Whether an unsafe call (synchronous, allocating) made now by this thread would break a capture; if so,
  // the captures concerned are invalidated, as the runtime does.
  bool unsafe_during_capture();

  // The detailed message of the latest error with this code, for cudaGetErrorString.
  const char* detail(cudaError_t code);
  void set_detail(cudaError_t code, const std::string& message);

  ~Engine();

 private:
  Engine();
  void run();
  bool ready(const Op& head) const;
  bool released(const Op& op) const { return waiting_hosts_ > 0 || op.id <= released_upto_; }
  void complete(CUstream_st* stream, std::uint64_t seq);
  void fail(int device, const Fault& fault);

  std::uint64_t next_id_ = 0;
  std::uint32_t next_lane_ = 0;
  History host_history_;  // the check of races between operations': what every host thread has waited for
  std::uint64_t released_upto_ = 0;
  int waiting_hosts_ = 0;
  bool stopping_ = false;
  std::vector<std::pair<cudaError_t, std::unique_ptr<std::string>>> details_;
  std::thread thread_;
};

// The calling host thread's last error (cudaGetLastError), set by failed calls.
cudaError_t record(cudaError_t status);

}  // namespace mnistdp::emu
