#include "emu/src/runtime/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>

#include "emu/src/checks/arena.hpp"
#include "emu/src/checks/operation_races.hpp"
#include "emu/src/runtime/config.hpp"

namespace mnistdp::emu {
namespace {

thread_local int tls_current_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;

}  // namespace

cudaError_t record(cudaError_t status) {
  if (status != cudaSuccess) tls_last_error = status;
  return status;
}

cudaError_t take_last_error(bool reset) {
  const cudaError_t e = tls_last_error;
  if (reset) tls_last_error = cudaSuccess;
  return e;
}

Engine& Engine::get() {
  static Engine engine;
  return engine;
}

Engine::Engine() {
  const Config& c = config();
  devices.resize(static_cast<std::size_t>(c.devices));
  for (int d = 0; d < c.devices; ++d) {
    Device& dev = devices[static_cast<std::size_t>(d)];
    dev.index = d;
    dev.legacy = std::make_unique<CUstream_st>();
    dev.legacy->device = d;
    dev.legacy->legacy = true;
    dev.streams.push_back(dev.legacy.get());
    dev.peer_enabled.assign(static_cast<std::size_t>(c.devices), false);
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex);
    stopping_ = true;
  }
  changed.notify_all();
  thread_.join();
}

int Engine::current_device() const {
  return tls_current_device;
}

cudaError_t Engine::set_current_device(int device) {
  if (device < 0 || device >= static_cast<int>(devices.size())) return cudaErrorInvalidDevice;
  tls_current_device = device;
  return cudaSuccess;
}

CUstream_st* Engine::resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy)
    return devices.at(static_cast<std::size_t>(tls_current_device)).legacy.get();
  return stream;
}

cudaError_t Engine::device_fault(int device) {
  std::lock_guard lock(mutex);
  return devices.at(static_cast<std::size_t>(device)).fault;
}

const char* Engine::detail(cudaError_t code) {
  std::lock_guard lock(mutex);
  for (auto it = details_.rbegin(); it != details_.rend(); ++it)
    if (it->first == code) return it->second->c_str();
  return nullptr;
}

void Engine::set_detail(cudaError_t code, const std::string& message) {
  std::lock_guard lock(mutex);
  for (auto& [c, text] : details_) {
    if (c == code) {
      // Replaced in place: a pointer handed out earlier stays valid (it now reads the newer message).
      *text = message;
      return;
    }
  }
  details_.emplace_back(code, std::make_unique<std::string>(message));
}

bool Engine::unsafe_during_capture() {
  std::lock_guard lock(mutex);
  bool unsafe = false;
  for (Device& d : devices) {
    for (CUstream_st* s : d.streams) {
      if (!s->capture) continue;
      const bool applies = s->capture_mode == cudaStreamCaptureModeGlobal ||
                           (s->capture_mode == cudaStreamCaptureModeThreadLocal &&
                            s->capture_thread == std::this_thread::get_id());
      if (applies) {
        s->capture_invalidated = true;
        unsafe = true;
      }
    }
  }
  return unsafe;
}

cudaError_t Engine::enqueue(CUstream_st* stream, Op op) {
  std::unique_lock lock(mutex);
  if (stream->capture) {
    if (stream->capture_invalidated) return cudaErrorStreamCaptureInvalidated;
    if (op.collective && op.collective->ranks > 1) {
      stream->capture_invalidated = true;
      lock.unlock();
      set_detail(cudaErrorStreamCaptureUnsupported,
                 "emulated CUDA: a collective of several ranks inside a stream capture is not emulated");
      return cudaErrorStreamCaptureUnsupported;
    }
    if (op.collective) op.run = op.collective->run;
    // A programmatic launch right after a kernel becomes a programmatic edge from that kernel's node, as
    // the runtime captures it; after anything else, or first in the capture, it is an ordinary node.
    std::vector<GraphNode>& nodes = stream->capture->nodes;
    const bool edge = op.programmatic && !nodes.empty() && nodes.back().kernel;
    nodes.push_back(GraphNode{op.what, op.run, op.kernel, edge, op.host_function});
    return cudaSuccess;
  }
  op.id = ++next_id_;
  op.seq = ++stream->enqueued;
  op.device = stream->device;
  if (op.done) op.done->release();  // what the host did before the call happens before the operation
  if (stream->lane == 0) stream->lane = ++next_lane_;
  if (op.done && block_races::wanted()) op.done->history = host_history_;
  op.previous = std::exchange(stream->last_done, op.done);
  // The legacy default stream waits for every blocking stream of its device and they wait for it.
  Device& dev = devices.at(static_cast<std::size_t>(stream->device));
  if (stream->legacy) {
    for (CUstream_st* s : dev.streams)
      if (s != stream && !s->nonblocking && s->enqueued > 0)
        op.after.push_back({s->completed, s->enqueued, s->last_done});
  } else if (!stream->nonblocking && dev.legacy->enqueued > 0) {
    op.after.push_back({dev.legacy->completed, dev.legacy->enqueued, dev.legacy->last_done});
  }
  if (op.collective) {
    Collective& c = *op.collective;
    // Every rank's op shares the collective; each records where it sits.
    for (int r = 0; r < c.ranks; ++r) {
      if (c.streams[static_cast<std::size_t>(r)] == stream && c.seqs[static_cast<std::size_t>(r)] == 0) {
        c.seqs[static_cast<std::size_t>(r)] = op.seq;
        ++c.joined;
        break;
      }
    }
  }
  if (waiting_hosts_ > 0) released_upto_ = op.id;
  stream->queue.push_back(std::move(op));
  lock.unlock();
  changed.notify_all();
  return cudaSuccess;
}

void Engine::wait(const std::function<bool()>& done) {
  std::unique_lock lock(mutex);
  ++waiting_hosts_;
  released_upto_ = next_id_;
  changed.notify_all();
  changed.wait(lock, done);
  --waiting_hosts_;
}

bool Engine::reached(const std::function<Completion()>& completion, HostWait how) {
  Completion c;
  bool done = false;
  if (how == HostWait::block) {
    {
      std::lock_guard lock(mutex);
      c = completion();
    }
    wait([&] { return c.counter->value >= c.target; });
    done = true;
  } else {
    wait([&] {
      c = completion();
      done = c.counter->value >= c.target;
      return true;
    });
  }
  if (done && c.done) {
    c.done->acquire();
    if (block_races::wanted()) {
      std::lock_guard lock(mutex);
      host_history_.join(c.done->history);
    }
  }
  return done;
}

void Engine::wait_stream(CUstream_st* stream) {
  reached([stream] { return all_enqueued(stream); }, HostWait::block);
}

bool Engine::ready(const Op& head) const {
  if (!released(head)) return false;
  for (const Dependency& d : head.after)
    if (d.counter->value < d.at_least) return false;
  return true;
}

void Engine::complete(CUstream_st* stream, std::uint64_t seq) {
  stream->completed->value = seq;
}

void Engine::fail(int device, const Fault& fault) {
  Device& d = devices.at(static_cast<std::size_t>(device));
  if (d.fault == cudaSuccess) {
    d.fault = fault.code;
    d.fault_message = fault.what();
    std::fprintf(stderr, "%s\n", fault.what());
    std::fflush(stderr);
  }
}

void Engine::run() {
  race::engine_identity() = race::current();
  // The race checks see the emulated threads' and the operations' accesses, not the engine's bookkeeping.
  const race::IgnoreAccesses bookkeeping;
  std::unique_lock lock(mutex);
  // The candidates: each stream's head, when released and free of unmet dependencies; a collective's head
  // only when every rank's call is a ready head too.
  auto ready_heads = [this] {
    std::vector<CUstream_st*> candidates;
    for (Device& d : devices) {
      for (CUstream_st* s : d.streams) {
        if (s->queue.empty() || !ready(s->queue.front())) continue;
        const Op& head = s->queue.front();
        if (head.collective) {
          const Collective& c = *head.collective;
          bool all = c.joined == c.ranks;
          for (int r = 0; all && r < c.ranks; ++r) {
            CUstream_st* peer = c.streams[static_cast<std::size_t>(r)];
            all = !peer->queue.empty() && peer->queue.front().seq == c.seqs[static_cast<std::size_t>(r)] &&
                  peer->queue.front().collective == head.collective && ready(peer->queue.front());
          }
          if (!all) continue;
        }
        candidates.push_back(s);
      }
    }
    return candidates;
  };
  // Device memory is open to the host's threads while the engine runs the devices' operations, and closed
  // again before a host thread that waited for them can go on (arena.hpp).
  std::optional<arena::Access> device_memory_open;
  while (true) {
    const std::vector<CUstream_st*> candidates = ready_heads();
    if (candidates.empty()) {
      device_memory_open.reset();
      if (stopping_) return;
      changed.wait(lock);
      continue;
    }
    // The order among independent streams: adversarial takes the latest-enqueued ready op (a seeded choice
    // between equals never arises: ids are unique); in-order the oldest.
    const bool latest = config().order == Order::adversarial;
    CUstream_st* pick = *std::max_element(candidates.begin(), candidates.end(), [&](auto* a, auto* b) {
      return latest ? a->queue.front().id < b->queue.front().id : a->queue.front().id > b->queue.front().id;
    });
    // Every operation taken now (the head, the programmatic launches behind it, a collective's peers), whose
    // tokens the operation's identity acquires and releases.
    std::deque<Op> taken;  // a deque: `op` stays valid as more are taken
    taken.push_back(std::move(pick->queue.front()));
    pick->queue.pop_front();
    const Op& op = taken.front();
    std::vector<std::pair<CUstream_st*, std::uint64_t>> finished{{pick, op.seq}};
    // A kernel and the programmatic launches already queued behind it, ready but for the stream's order,
    // run as one chain: the later kernels start when the earlier trigger. A graph launch's nodes chain only
    // among themselves, along the graph's programmatic edges.
    std::vector<std::shared_ptr<const KernelLaunch>> chain;
    if (op.kernel && !op.kernel->spec.cooperative && config().programmatic_overlap) {
      chain.push_back(op.kernel);
      while (!pick->queue.empty()) {
        const Op& next = pick->queue.front();
        if (!next.kernel || !next.programmatic || next.graph_launch != op.graph_launch ||
            next.kernel->spec.cooperative || !ready(next))
          break;
        chain.push_back(next.kernel);
        finished.emplace_back(pick, next.seq);
        taken.push_back(std::move(pick->queue.front()));
        pick->queue.pop_front();
      }
    }
    if (op.collective) {
      for (CUstream_st* peer : op.collective->streams) {
        if (peer == pick) continue;
        finished.emplace_back(peer, peer->queue.front().seq);
        taken.push_back(std::move(peer->queue.front()));
        peer->queue.pop_front();
      }
    }
    std::vector<int> touched;
    for (auto& [s, seq] : finished)
      touched.push_back(s->device);
    bool faulted = false;
    for (int d : touched)
      faulted = faulted || devices.at(static_cast<std::size_t>(d)).fault != cudaSuccess;
    if (!faulted) {
      lock.unlock();
      std::vector<const race::Token*> after;
      std::vector<const race::Token*> done;
      for (const Op& o : taken) {
        after.push_back(o.done.get());
        after.push_back(o.previous.get());
        for (const Dependency& d : o.after)
          after.push_back(d.done.get());
        done.push_back(o.done.get());
      }
      // The check of races between operations: their history, and each operation's place in it.
      History history;
      std::vector<Epoch> epochs;
      std::vector<std::pair<std::uint64_t, Epoch>> kernels;
      std::optional<operation_races::Step> step;
      if (block_races::wanted()) {
        for (const race::Token* t : after)
          if (t) history.join(t->history);
        for (std::size_t i = 0; i < taken.size(); ++i) {
          epochs.push_back(Epoch{finished[i].first->lane, finished[i].second});
          if (taken[i].kernel) kernels.emplace_back(taken[i].kernel->number, epochs.back());
        }
        step.emplace(history, std::move(kernels), epochs.front(), op.device);
      }
      std::optional<Fault> fault;
      {
        race::Operation identity(after);
        // A host function runs as host code: device memory is not its to touch.
        if (op.host_function)
          device_memory_open.reset();
        else if (!device_memory_open)
          device_memory_open.emplace();
        try {
          if (op.collective)
            op.collective->run();
          else if (chain.size() > 1)
            run_programmatic_chain(chain);
          else if (op.run)
            op.run();
        } catch (const Fault& f) {
          fault = f;
        }
        identity.finish(done);
      }
      if (step) {
        step.reset();
        for (const Epoch& e : epochs)
          history.add(e);
        for (const Op& o : taken)
          o.done->history = history;
      }
      if (fault) {
        lock.lock();
        for (int d : touched)
          fail(d, *fault);
        lock.unlock();
        set_detail(fault->code, fault->what());
      }
      lock.lock();
    }
    for (auto& [s, seq] : finished)
      complete(s, seq);
    chain.clear();
    taken.clear();
    if (ready_heads().empty()) device_memory_open.reset();
    changed.notify_all();
  }
}

}  // namespace mnistdp::emu
