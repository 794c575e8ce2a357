// Kernel launches: checked as the runtime checks them when the call is made, then run as one operation of
// the stream, block by block (engine.hpp, block.hpp).
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "emu/src/checks/device_shadow.hpp"
#include "emu/src/device/block.hpp"
#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"
#include "emu/src/runtime/memory.hpp"
#include "emu/src/runtime/resources.hpp"

namespace mnistdp::emu {
namespace {

cudaError_t refuse(cudaError_t code, const LaunchSpec& spec, const std::string& why) {
  Engine::get().set_detail(code, "emulated CUDA: launch of " + std::string(spec.name) + " refused: " + why);
  return record(code);
}

std::uint64_t next_launch_number() {
  static std::atomic<std::uint64_t> launches{0};
  return launches.fetch_add(1, std::memory_order_relaxed);
}

// The grid's block indices, in the adversarial order a seeded shuffle of them.
std::vector<uint3> block_indices(dim3 g, std::uint64_t seed) {
  std::vector<uint3> blocks;
  blocks.reserve(static_cast<std::size_t>(g.x) * g.y * g.z);
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x)
        blocks.push_back({x, y, z});
  if (config().order == Order::adversarial) {
    std::mt19937_64 rng(seed);
    std::shuffle(blocks.begin(), blocks.end(), rng);
  }
  return blocks;
}

// The fault to report from blocks running on OS threads of their own: the block that failed first names
// the problem; the others only stopped because of it.
class FirstFault {
 public:
  void note(const Fault& f) {
    std::lock_guard lock(mutex_);
    const std::string what = f.what();
    if (what_.empty() || (only_aborted(what_) && !only_aborted(what))) {
      what_ = what;
      code_ = f.code;
    }
  }
  void rethrow() const {
    if (!what_.empty()) throw Fault(code_, what_);
  }

 private:
  static bool only_aborted(const std::string& m) { return m.find("aborted: another block") != m.npos; }
  std::mutex mutex_;
  std::string what_;
  cudaError_t code_ = cudaErrorLaunchFailure;
};

// The shadow of device memory as the kernels of `device` see it (device_shadow.hpp): their own device's part
// and their peers'.
void show_devices_to(int device) {
  Engine& e = Engine::get();
  if (e.devices.size() < 2) return;
  std::vector<bool> visible;
  {
    std::lock_guard lock(e.mutex);
    visible = e.devices[static_cast<std::size_t>(device)].peer_enabled;
  }
  visible.resize(e.devices.size(), false);
  visible[static_cast<std::size_t>(device)] = true;
  device_shadow::show_devices(visible);
}

void run_grid(const LaunchSpec& spec, const std::function<void()>& body, int device, std::uint64_t launch) {
  show_devices_to(device);
  const race::Token start;
  const race::Token end;
  const race::KernelRun kernel_run(start, {&end});
  std::optional<block_races::Launch> accesses;
  if (block_races::wanted()) accesses.emplace(spec, operation_races::Step::place_of(launch, nullptr));
  const checks::LaunchChecks tokens{&start, &end, accesses ? &*accesses : nullptr};
  const std::uint64_t seed = mix(config().seed, launch);
  const std::vector<uint3> blocks = block_indices(spec.grid, seed);
  if (!spec.cooperative) {
    // Blocks are independent: one after another.
    for (std::size_t i = 0; i < blocks.size(); ++i)
      run_block(spec, body, blocks[i], nullptr, mix(seed, i), nullptr, tokens);
  } else {
    // All blocks resident at once, each on an OS thread of its own (so that its __shared__ variables, which
    // are thread_local, are its own), meeting at the grid barrier.
    GridBarrier barrier(static_cast<int>(blocks.size()));
    FirstFault fault;
    std::vector<std::thread> threads;
    threads.reserve(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      threads.push_back(race::spawn([&, i] {
        try {
          run_block(spec, body, blocks[i], &barrier, mix(seed, i), nullptr, tokens);
        } catch (const Fault& f) {
          barrier.abort();
          fault.note(f);
        }
      }));
    }
    for (std::thread& t : threads)
      t.join();
    fault.rethrow();
  }
  if (accesses) accesses->check();
  check_guard_zones(device, spec.name);
}

// A kernel and the programmatic launches behind it (on a stream, or along a graph's programmatic edges),
// each block on an OS thread of its own, so that a block can be held where a GPU may hold it. Kernel k + 1's
// blocks start once every block of kernel k has triggered (one of its threads has called
// cudaTriggerProgrammaticLaunchCompletion()) or exited; a block of kernel k that triggers is held there
// until every block of kernel k + 1 is, at once, waiting in cudaGridDependencySynchronize(), held after its
// own trigger, or finished; and that wait returns once every block of kernel k has finished. So the
// dependent kernel runs as far as it can before the primary's work after its trigger: a read of the
// primary's output before the wait sees the values from before the primary.
class ProgrammaticChain {
 public:
  explicit ProgrammaticChain(const std::vector<std::shared_ptr<const KernelLaunch>>& chain) {
    const std::uint64_t* previous = nullptr;  // the launch before, in the chain
    for (const auto& launch : chain) {
      Kernel k;
      k.launch = launch.get();
      k.seed = mix(config().seed, launch->number);
      k.blocks = block_indices(launch->spec.grid, k.seed);
      k.end = std::make_unique<race::Token>();
      if (block_races::wanted())
        k.accesses = std::make_unique<block_races::Launch>(
            launch->spec, operation_races::Step::place_of(launch->number, previous));
      kernels_.push_back(std::move(k));
      previous = &launch->number;
    }
  }

  void run() {
    const race::Token start;
    std::vector<const race::Token*> ends;
    for (const Kernel& k : kernels_)
      ends.push_back(k.end.get());
    const race::KernelRun chain_run(start, ends);
    start_ = &start;
    FirstFault fault;
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < kernels_.size(); ++k)
      for (std::size_t b = 0; b < kernels_[k].blocks.size(); ++b)
        threads.push_back(race::spawn([this, &fault, k, b] { run_block_of(k, b, fault); }));
    for (std::thread& t : threads)
      t.join();
    fault.rethrow();
    // The dependents first: where both sides of a race before a programmatic wait saw it, the report names
    // the access before the wait, the one to move.
    for (auto k = kernels_.rbegin(); k != kernels_.rend(); ++k)
      if (k->accesses) k->accesses->check();
    for (const Kernel& k : kernels_)
      check_guard_zones(k.launch->device, k.launch->spec.name);
  }

 private:
  struct Kernel {
    const KernelLaunch* launch = nullptr;
    std::uint64_t seed = 0;
    std::vector<uint3> blocks;
    std::size_t triggered = 0;  // blocks that have triggered or finished
    std::size_t finished = 0;
    std::size_t held = 0;   // blocks waiting for the kernel before, held after their trigger, or finished
    bool all_held = false;  // every block was held at once: the kernel before may go on
    std::unique_ptr<race::Token> end;  // the race checks': released by the kernel's threads as they exit
    std::unique_ptr<block_races::Launch> accesses;  // the race checks': its blocks' accesses
  };

  class Link : public ProgrammaticLink {
   public:
    Link(ProgrammaticChain& chain, std::size_t k) : chain_(chain), k_(k) {}
    bool has_previous() const override { return k_ > 0; }
    bool has_next() const override { return k_ + 1 < chain_.kernels_.size(); }
    bool block_triggered() override {
      std::unique_lock lock(chain_.mutex_);
      triggered_ = true;
      ++chain_.kernels_[k_].triggered;
      chain_.hold(k_);  // a block calls this only where a next kernel exists (has_next)
      chain_.changed_.wait(lock, [&] { return chain_.kernels_[k_ + 1].all_held || chain_.aborted_; });
      --chain_.kernels_[k_].held;
      return !chain_.aborted_;
    }
    bool wait_for_previous() override {
      std::unique_lock lock(chain_.mutex_);
      chain_.hold(k_);
      const Kernel& previous = chain_.kernels_[k_ - 1];
      chain_.changed_.wait(lock,
                           [&] { return previous.finished == previous.blocks.size() || chain_.aborted_; });
      --chain_.kernels_[k_].held;
      return !chain_.aborted_;
    }
    const race::Token* previous_end() const override {
      return k_ > 0 ? chain_.kernels_[k_ - 1].end.get() : nullptr;
    }
    bool triggered() const { return triggered_; }

   private:
    ProgrammaticChain& chain_;
    std::size_t k_;
    bool triggered_ = false;
  };

  // Under the lock: one more block of kernel k held; notifies.
  void hold(std::size_t k) {
    Kernel& kernel = kernels_[k];
    if (++kernel.held == kernel.blocks.size()) kernel.all_held = true;
    changed_.notify_all();
  }

  void run_block_of(std::size_t k, std::size_t b, FirstFault& fault) {
    Kernel& kernel = kernels_[k];
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] {
        return k == 0 || kernels_[k - 1].triggered == kernels_[k - 1].blocks.size() || aborted_;
      });
      if (aborted_) return;
    }
    Link link(*this, k);
    try {
      run_block(kernel.launch->spec, *kernel.launch->body, kernel.blocks[b], nullptr, mix(kernel.seed, b),
                &link, checks::LaunchChecks{start_, kernel.end.get(), kernel.accesses.get()});
    } catch (const Fault& f) {
      fault.note(f);
      std::lock_guard lock(mutex_);
      aborted_ = true;
      changed_.notify_all();
      return;
    }
    std::lock_guard lock(mutex_);
    if (!link.triggered()) ++kernel.triggered;
    ++kernel.finished;
    hold(k);
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool aborted_ = false;
  std::vector<Kernel> kernels_;
  const race::Token* start_ = nullptr;  // the race checks': the chain's start, for every kernel of it
};

}  // namespace

void run_programmatic_chain(const std::vector<std::shared_ptr<const KernelLaunch>>& chain) {
  show_devices_to(chain.front()->device);  // a chain is one stream's, on one device
  ProgrammaticChain(chain).run();
}

cudaError_t enqueue_launch(const LaunchSpec& spec, CUstream_st* stream_handle,
                           void (*thread_body)(const void*), std::shared_ptr<const void> parameters,
                           std::size_t parameter_bytes) {
  Engine& e = Engine::get();
  if (e.devices.empty()) return record(cudaErrorNoDevice);
  CUstream_st* stream = e.resolve(stream_handle);
  const int device = e.current_device();
  if (stream->device != device)
    return refuse(cudaErrorInvalidResourceHandle, spec,
                  "its stream belongs to another device than the current one");
  if (const cudaError_t f = e.device_fault(device); f != cudaSuccess) return record(f);
  // Held to the kernel's resources as an H200 holds it (resources.hpp).
  std::string why;
  const resources::Kernel* kernel_resources = resources::find(spec.kernel, why);
  if (!kernel_resources)
    return refuse(cudaErrorInvalidDeviceFunction, spec, "no ptxas figures for the kernel (" + why + ")");
  const KernelResources& figures = kernel_resources->figures;
  const dim3 b = spec.block;
  const dim3 g = spec.grid;
  const long threads = static_cast<long>(b.x) * b.y * b.z;
  if (threads < 1 || threads > resources::kMaxThreadsPerBlock || b.z > 64)
    return refuse(cudaErrorInvalidConfiguration, spec,
                  "a block of " + std::to_string(b.x) + "x" + std::to_string(b.y) + "x" +
                      std::to_string(b.z) + " threads");
  if (g.x < 1 || g.y < 1 || g.z < 1 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u)
    return refuse(cudaErrorInvalidConfiguration, spec,
                  "a grid of " + std::to_string(g.x) + "x" + std::to_string(g.y) + "x" + std::to_string(g.z) +
                      " blocks");
  if (threads > kernel_resources->max_threads_per_block) {
    const bool bounds =
        figures.max_threads > 0 && figures.max_threads == kernel_resources->max_threads_per_block;
    return refuse(cudaErrorLaunchOutOfResources, spec,
                  "a block of " + std::to_string(threads) + " threads, above the " +
                      std::to_string(kernel_resources->max_threads_per_block) + " of " +
                      (bounds ? "its __launch_bounds__"
                              : "a block's 65,536 registers at its " + std::to_string(figures.registers) +
                                    " a thread (ptxas)"));
  }
  const std::size_t max_dynamic = resources::max_dynamic_shared(device, spec.kernel, *kernel_resources);
  if (spec.shared_bytes > max_dynamic) {
    const bool raised = max_dynamic + figures.static_shared != resources::kSharedPerBlock;
    return refuse(cudaErrorInvalidValue, spec,
                  std::to_string(spec.shared_bytes) + " bytes of dynamic shared memory beside its " +
                      std::to_string(figures.static_shared) + " static (ptxas), above the " +
                      (raised ? std::to_string(max_dynamic) +
                                    " bytes of dynamic its cudaFuncAttributeMaxDynamicSharedMemorySize allows"
                              : std::string("48 KiB a block has without cudaFuncSetAttribute")));
  }
  if (spec.cooperative) {
    const long blocks = static_cast<long>(g.x) * g.y * g.z;
    const long resident = static_cast<long>(resources::blocks_per_sm(figures, static_cast<int>(threads),
                                                                     spec.shared_bytes, max_dynamic)) *
                          config().sms;
    if (blocks > resident)
      return refuse(cudaErrorCooperativeLaunchTooLarge, spec,
                    std::to_string(blocks) + " blocks, more than the " + std::to_string(resident) +
                        " that stay resident at once on its " + std::to_string(config().sms) + " SMs");
  }
  Op op;
  op.what = "kernel " + std::string(spec.name);
  // The spec's name points to storage that lives as long as the program (kernel_name's statics).
  auto kernel = std::make_shared<KernelLaunch>();
  kernel->spec = spec;
  kernel->spec.device = device;
  // The kernel may touch its parameters while the launch lives (device_shadow.hpp).
  const void* const parameter_space = parameters.get();
  device_shadow::allow(parameter_space, parameter_bytes);
  std::shared_ptr<const void> allowed(parameter_space,
                                      [held = std::move(parameters), parameter_bytes](const void* p) mutable {
                                        device_shadow::disallow(p, parameter_bytes);
                                        held.reset();
                                      });
  kernel->spec.parameters = allowed.get();
  kernel->spec.parameter_bytes = parameter_bytes;
  kernel->body = std::make_shared<const std::function<void()>>(
      [thread_body, parameters = std::move(allowed)] { thread_body(parameters.get()); });
  kernel->device = device;
  kernel->number = next_launch_number();
  op.run = [kernel] { run_grid(kernel->spec, *kernel->body, kernel->device, kernel->number); };
  op.programmatic = spec.programmatic;
  op.kernel = std::move(kernel);
  return record(e.enqueue(stream, std::move(op)));
}

const char* kernel_name_of(const void* kernel) {
  static std::mutex mutex;
  static std::map<const void*, std::string> names;
  std::lock_guard lock(mutex);
  auto it = names.find(kernel);
  if (it == names.end()) {
    std::string name;
    Dl_info info{};
    if (dladdr(kernel, &info) && info.dli_sname) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      name = status == 0 && demangled ? demangled : info.dli_sname;
      std::free(demangled);
    } else {
      char text[48];
      std::snprintf(text, sizeof text, "the kernel at %p", kernel);
      name = text;
    }
    it = names.emplace(kernel, name).first;
  }
  return it->second.c_str();
}

}  // namespace mnistdp::emu
