// NCCL over the emulated devices of this process: an all-reduce is one operation per rank, and the engine
// runs them together once every rank's call has reached the head of its stream (engine.hpp), so that ranks
// driven from one thread, or from several, never deadlock. Across processes (ncclGetUniqueId and
// ncclCommInitRankConfig, one rank per process), the ranks meet in shared memory (nccl_processes.hpp): each
// rank's all-reduce is an operation of its own, which waits there for its peers'. Either way the sum is
// taken in the order of NCCL's ring (nccl_ring.hpp), so that a sum of three ranks or more differs in its
// last bits from chunk to chunk as NCCL's does.
//
// A non-blocking communicator (ncclConfig_t::blocking = 0) keeps NCCL's contract to the letter: each of its
// calls (ncclCommInitRankConfig, ncclAllReduce, ncclCommFinalize) may return ncclInProgress, and the caller
// must then poll ncclCommGetAsyncError until it says something else before calling NCCL on that communicator
// again (NCCL answers ncclInvalidArgument, and so does this) or putting work on the collective's stream
// (NCCL would order that work before the collective; this reports it as the communicator's error). An
// all-reduce in progress is not yet on its stream: it is enqueued by the poll that completes it. How many
// polls each call takes is drawn from the seed (MNISTDP_EMU_NCCL_POLLS), and a planted failure
// (MNISTDP_EMU_NCCL_FAIL) arrives as the asynchronous error, its all-reduce held on the stream, as a GPU's
// NCCL kernel waits for a peer that never answers, until ncclCommAbort ends it. ncclCommAbort is allowed at
// any time.
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "emu/src/checks/device_addresses.hpp"
#include "emu/src/libs/nccl_processes.hpp"
#include "emu/src/libs/nccl_ring.hpp"
#include "emu/src/runtime/config.hpp"
#include "emu/src/runtime/engine.hpp"

namespace {

thread_local std::string tls_last_error;
thread_local int tls_group_depth = 0;

struct Table {
  std::vector<const float*> send;
  std::vector<float*> recv;
  std::vector<int> devices;  // each rank's communicator's
  std::size_t count = 0;
  int calls = 0;  // ranks that have made the call
};

struct Clique {
  int ranks = 0;
  std::mutex mutex;
  std::map<std::uint64_t, std::pair<std::shared_ptr<mnistdp::emu::Collective>, std::shared_ptr<Table>>>
      pending;
};

ncclResult_t fail(ncclResult_t code, const std::string& message) {
  tls_last_error = "emulated NCCL: " + message;
  return code;
}

// An all-reduce's kernel on `device` reads `send` and writes `recv`, count floats each: both must be memory
// that device reaches, or it faults as a GPU's NCCL kernel would (device_addresses::library_reaches).
void reaches(int device, const float* send, const float* recv, std::size_t count) {
  mnistdp::emu::device_addresses::library_reaches("ncclAllReduce", device, send, count * sizeof(float));
  mnistdp::emu::device_addresses::library_reaches("ncclAllReduce", device, recv, count * sizeof(float));
}

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
  }
  return "an unknown result";
}

// A call of a non-blocking communicator that has returned ncclInProgress (or completed within the call).
struct Pending {
  std::string call;  // "ncclAllReduce #3"
  int polls_left = 0;
  // Run by the poll that completes the call: the communicator's state after it, or ncclInProgress while
  // what it waits for (a finalize: the posted all-reduces) has not happened yet.
  std::function<ncclResult_t()> finish;
  std::optional<ncclResult_t> planted;  // the failure it ends with
  bool hangs = false;                   // never completes
  bool hold = false;                    // an all-reduce held on its stream until ncclCommAbort
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  // A rank of a communicator across processes; null for a world of one and ncclCommInitAll's cliques.
  std::shared_ptr<mnistdp::emu::nccl::Link> link;
  int rank = 0;
  int device = 0;
  std::uint64_t calls = 0;
  // A non-blocking communicator's state (ncclCommInitRankConfig with blocking = 0).
  bool nonblocking = false;
  mnistdp::emu::NcclConfig nccl;  // read when it was made
  std::uint64_t started = 0;      // its calls so far, which seed the number of polls each takes
  std::map<std::string, int> counts;
  std::optional<Pending> pending;
  ncclResult_t async = ncclSuccess;
  std::string async_message;
  bool finalized = false;
  // The latest posted all-reduce: its stream's count of completed operations and its place there.
  std::shared_ptr<mnistdp::emu::Counter> posted;
  std::uint64_t posted_seq = 0;
  // The all-reduces held on their streams by a planted failure, released by ncclCommAbort.
  std::vector<std::shared_ptr<mnistdp::emu::Counter>> held;
};

namespace {

// A failure that a peer's process or the shared memory has reported becomes the communicator's error: the
// call in progress, if any, will not complete.
void adopt_link_failure(ncclComm& c) {
  if (!c.link || c.async != ncclSuccess) return;
  if (const auto f = c.link->failure()) {
    c.async = f->code;
    c.async_message = f->message;
    c.pending.reset();
    fail(c.async, c.async_message);
  }
}

// The poll that may complete the pending call.
void advance(ncclComm& c) {
  Pending& p = *c.pending;
  if (p.hangs) return;
  if (p.polls_left > 0) {
    --p.polls_left;
    return;
  }
  const ncclResult_t r = p.finish();
  if (r == ncclInProgress) return;
  if (p.planted) {
    c.async = *p.planted;
    c.async_message = p.call + " on rank " + std::to_string(c.rank) + " ended with " +
                      result_name(*p.planted) + " (planted by MNISTDP_EMU_NCCL_FAIL)";
  } else if (r != ncclSuccess) {
    c.async = r;
    c.async_message = tls_last_error.substr(std::strlen("emulated NCCL: "));
  }
  c.pending.reset();
  if (c.async != ncclSuccess) fail(c.async, c.async_message);
}

// Starts `call` on a non-blocking communicator: ncclInProgress for the drawn number of polls, then `finish`.
ncclResult_t start(ncclComm& c, const std::string& call, std::function<ncclResult_t()> finish) {
  const int nth = ++c.counts[call];
  Pending p;
  p.call = call + " #" + std::to_string(nth);
  const std::uint64_t draw = mnistdp::emu::mix(mnistdp::emu::config().seed ^ 0x4e43434cull, c.started++);
  p.polls_left =
      c.nccl.max_polls == 0 ? 0 : 1 + static_cast<int>(draw % static_cast<std::uint64_t>(c.nccl.max_polls));
  p.finish = std::move(finish);
  if (c.nccl.fail_call == call && c.nccl.fail_nth == nth) {
    const std::string& r = c.nccl.fail_result;
    if (r != "hang")
      p.planted = r == "ncclSystemError"     ? ncclSystemError
                  : r == "ncclInternalError" ? ncclInternalError
                                             : ncclRemoteError;
    // A planted all-reduce is posted and held on its stream: a hung one reports nothing, a failed one its
    // error. Any other call that hangs stays in progress.
    p.hold = call == "ncclAllReduce";
    p.hangs = r == "hang" && !p.hold;
  }
  const int polls = p.polls_left;
  c.pending = std::move(p);
  if (polls > 0 || c.pending->hangs) return ncclInProgress;
  advance(c);
  // Completed within the call, or still waiting: an error arrives through ncclCommGetAsyncError either way.
  return c.pending ? ncclInProgress : ncclSuccess;
}

// What NCCL checks before every call on a communicator but ncclCommGetAsyncError and ncclCommAbort.
ncclResult_t ensure_ready(ncclComm& c, const char* call) {
  adopt_link_failure(c);
  if (c.pending)
    return fail(
        ncclInvalidArgument,
        std::string(call) + " on a non-blocking communicator whose " + c.pending->call +
            " is still in progress: poll ncclCommGetAsyncError until it is no longer ncclInProgress first");
  if (c.async != ncclSuccess)
    return fail(c.async, std::string(call) + " on a communicator in error (" + result_name(c.async) + ": " +
                             c.async_message + "): only ncclCommAbort may follow");
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId without an id to fill");
  try {
    mnistdp::emu::nccl::make_rendezvous(*id);
  } catch (const mnistdp::emu::nccl::LinkError& e) {
    return fail(e.code, std::string("ncclGetUniqueId: ") + e.what());
  }
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  return tls_last_error.c_str();
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devices) {
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll needs at least one device");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return fail(ncclUnhandledCudaError, "no emulated device");
  auto clique = std::make_shared<Clique>();
  clique->ranks = ndev;
  for (int r = 0; r < ndev; ++r) {
    const int d = devices ? devices[r] : r;
    if (d < 0 || d >= count) {
      for (int i = 0; i < r; ++i)
        delete comms[i];
      return fail(ncclInvalidArgument,
                  "device " + std::to_string(d) + " does not exist (" + std::to_string(count) + " emulated)");
    }
    comms[r] = new ncclComm();
    comms[r]->clique = clique;
    comms[r]->rank = r;
    comms[r]->device = d;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRankConfig without a communicator to fill");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "rank " + std::to_string(rank) + " of a communicator of " +
                                         std::to_string(nranks) + " ranks");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fail(ncclUnhandledCudaError, "no emulated device");
  auto made = std::make_unique<ncclComm>();
  made->clique = std::make_shared<Clique>();
  made->clique->ranks = nranks;
  made->rank = rank;
  made->device = device;
  made->nonblocking = config && config->blocking == 0;
  if (made->nonblocking) {
    try {
      made->nccl = mnistdp::emu::nccl_config();
    } catch (const std::runtime_error& e) {
      return fail(ncclInvalidUsage, e.what());
    }
  }
  try {
    made->link = mnistdp::emu::nccl::Link::join(id, nranks, rank);
  } catch (const mnistdp::emu::nccl::LinkError& e) {
    return fail(e.code, std::string("ncclCommInitRankConfig: ") + e.what());
  }
  // A world of one has joined and unlinked its rendezvous: its all-reduce copies.
  if (nranks == 1) made->link.reset();
  if (!made->nonblocking) {
    // NCCL's blocking init returns once every rank has arrived; a peer that died before is an error.
    if (made->link) {
      while (!made->link->all_joined()) {
        if (const auto f = made->link->failure()) {
          made->link->abort();  // the ranks that have joined are told
          return fail(f->code, "ncclCommInitRankConfig: " + f->message);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    *comm = made.release();
    return ncclSuccess;
  }
  // A non-blocking init hands out the communicator at once; it is usable once polled to ncclSuccess, which
  // it cannot be before every rank has joined.
  ncclComm* c = made.release();
  *comm = c;
  return start(*c, "ncclCommInitRankConfig", [c] {
    if (!c->link || c->link->all_joined()) return ncclSuccess;
    if (const auto f = c->link->failure()) return fail(f->code, f->message);
    return ncclInProgress;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommFinalize without a communicator");
  if (const ncclResult_t ready = ensure_ready(*comm, "ncclCommFinalize"); ready != ncclSuccess) return ready;
  if (comm->finalized) return fail(ncclInvalidUsage, "ncclCommFinalize on a communicator already finalized");
  if (!comm->nonblocking) {
    comm->finalized = true;
    return ncclSuccess;
  }
  ncclComm* c = comm;
  // Completes once the posted all-reduces have run: a poll releases the queued work, as a query does.
  return start(*comm, "ncclCommFinalize", [c] {
    if (c->posted) {
      const auto counter = c->posted;
      const std::uint64_t seq = c->posted_seq;
      const bool done = mnistdp::emu::Engine::get().reached(
          [&] {
            return mnistdp::emu::Engine::Completion{counter, seq, nullptr};
          },
          mnistdp::emu::Engine::HostWait::query);
      if (!done) return ncclInProgress;
    }
    c->finalized = true;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  adopt_link_failure(*comm);
  if (comm->link && comm->async != ncclSuccess)
    return fail(ncclInvalidUsage, std::string("ncclCommDestroy on a communicator in error (") +
                                      result_name(comm->async) + "): ncclCommAbort ends it");
  if (comm->nonblocking) {
    if (comm->pending || comm->async != ncclSuccess)
      return fail(ncclInvalidUsage,
                  "ncclCommDestroy on a communicator " +
                      (comm->pending ? "whose " + comm->pending->call + " is in progress"
                                     : std::string("in error (") + result_name(comm->async) + ")") +
                      ": ncclCommAbort ends it");
    // NCCL's destroy would wait for the held all-reduce forever.
    if (!comm->held.empty())
      return fail(
          ncclInvalidUsage,
          "ncclCommDestroy on a communicator with an all-reduce that cannot complete: ncclCommAbort ends it");
  }
  if (comm->link) comm->link->leave();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  // Ends an all-reduce waiting for its peers (its result undefined: NaN) and tells them this rank is gone.
  if (comm->link) comm->link->abort();
  // Ends the held all-reduces, as an abort ends NCCL's kernels: their streams drain, their results undefined.
  if (!comm->held.empty()) {
    auto& engine = mnistdp::emu::Engine::get();
    {
      std::lock_guard lock(engine.mutex);
      for (const auto& gate : comm->held)
        gate->value = 1;
    }
    engine.changed.notify_all();
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !state)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError without a communicator or a state");
  if (comm->pending) advance(*comm);
  adopt_link_failure(*comm);
  *state = comm->pending ? ncclInProgress : comm->async;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++tls_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tls_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --tls_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!comm) return fail(ncclInvalidArgument, "ncclAllReduce without a communicator");
  if (const ncclResult_t ready = ensure_ready(*comm, "ncclAllReduce"); ready != ncclSuccess) return ready;
  if (comm->finalized) return fail(ncclInvalidUsage, "ncclAllReduce after ncclCommFinalize");
  if (datatype != ncclFloat || op != ncclSum)
    return fail(ncclInvalidArgument, "only the float sum all-reduce is emulated");
  if (count > 0 && (!sendbuff || !recvbuff)) return fail(ncclInvalidArgument, "a null buffer");
  auto& engine = mnistdp::emu::Engine::get();
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess || current != comm->device)
    return fail(ncclInvalidUsage,
                "ncclAllReduce called while another device than the communicator's is current");
  CUstream_st* s = engine.resolve(stream);
  if (s->device != comm->device)
    return fail(ncclInvalidUsage, "ncclAllReduce on a stream of another device than the communicator's");
  const auto* send = static_cast<const float*>(sendbuff);
  auto* recv = static_cast<float*>(recvbuff);
  mnistdp::emu::Op o;
  o.what = "ncclAllReduce";
  Clique& clique = *comm->clique;
  if (comm->link) {
    {
      // The ranks of other processes cannot join a graph's replay: refused as a collective of several
      // ranks of this process is (engine.cpp).
      std::lock_guard lock(engine.mutex);
      if (s->capture) {
        s->capture_invalidated = true;
        return fail(ncclInvalidUsage,
                    "an all-reduce across processes inside a stream capture is not emulated");
      }
    }
    o.run = [link = comm->link, device = comm->device, send, recv, count] {
      reaches(device, send, recv, count);
      mnistdp::emu::device_operation_touches("ncclAllReduce", send, count * sizeof(float), false);
      mnistdp::emu::device_operation_touches("ncclAllReduce", recv, count * sizeof(float), true);
      link->all_reduce(send, recv, count);
    };
  } else if (clique.ranks == 1) {
    o.run = [device = comm->device, send, recv, count] {
      reaches(device, send, recv, count);
      mnistdp::emu::device_operation_touches("ncclAllReduce", send, count * sizeof(float), false);
      mnistdp::emu::device_operation_touches("ncclAllReduce", recv, count * sizeof(float), true);
      if (send != recv) std::memmove(recv, send, count * sizeof(float));
    };
  }
  if (comm->link || clique.ranks == 1) {
    if (!comm->nonblocking)
      return engine.enqueue(s, std::move(o)) == cudaSuccess ? ncclSuccess
                                                            : fail(ncclInvalidUsage, "refused by a capture");
    if (tls_group_depth > 0)
      return fail(ncclInvalidUsage,
                  "a non-blocking communicator's ncclAllReduce inside a group is not emulated");
    std::uint64_t enqueued_at_call = 0;
    {
      std::lock_guard lock(engine.mutex);
      enqueued_at_call = s->enqueued;
    }
    ncclComm* c = comm;
    const std::string call = "ncclAllReduce #" + std::to_string(comm->counts["ncclAllReduce"] + 1);
    return start(
        *comm, "ncclAllReduce", [c, s, o = std::move(o), enqueued_at_call, call, recv, count]() mutable {
          auto& eng = mnistdp::emu::Engine::get();
          std::uint64_t enqueued_now = 0;
          {
            std::lock_guard lock(eng.mutex);
            enqueued_now = s->enqueued;
          }
          if (enqueued_now != enqueued_at_call)
            return fail(ncclInvalidUsage,
                        "work was put on the stream of " + call +
                            " while it was in progress (before ncclCommGetAsyncError "
                            "said ncclSuccess): NCCL would have ordered it before the all-reduce");
          if (c->pending->hold) {
            // Held until ncclCommAbort, which leaves its result undefined: NaN here.
            auto gate = std::make_shared<mnistdp::emu::Counter>();
            c->held.push_back(gate);
            o.after.push_back({gate, 1, nullptr});
            o.run = [recv, count] {
              mnistdp::emu::device_operation_touches("ncclAllReduce", recv, count * sizeof(float), true);
              std::fill(recv, recv + count, std::numeric_limits<float>::quiet_NaN());
            };
          }
          if (eng.enqueue(s, std::move(o)) != cudaSuccess)
            return fail(ncclInvalidUsage, call + " refused by a capture");
          {
            std::lock_guard lock(eng.mutex);
            c->posted = s->completed;
            c->posted_seq = s->enqueued;
          }
          return ncclSuccess;
        });
  }
  const std::uint64_t call = comm->calls++;
  std::shared_ptr<mnistdp::emu::Collective> collective;
  std::shared_ptr<Table> table;
  {
    std::lock_guard lock(clique.mutex);
    auto& slot = clique.pending[call];
    if (!slot.first) {
      slot.first = std::make_shared<mnistdp::emu::Collective>();
      slot.second = std::make_shared<Table>();
      slot.first->ranks = clique.ranks;
      slot.first->streams.assign(static_cast<std::size_t>(clique.ranks), nullptr);
      slot.first->seqs.assign(static_cast<std::size_t>(clique.ranks), 0);
      slot.second->send.assign(static_cast<std::size_t>(clique.ranks), nullptr);
      slot.second->recv.assign(static_cast<std::size_t>(clique.ranks), nullptr);
      slot.second->devices.assign(static_cast<std::size_t>(clique.ranks), 0);
      slot.second->count = count;
      std::shared_ptr<Table> t = slot.second;
      slot.first->run = [t] {
        for (std::size_t r = 0; r < t->send.size(); ++r)
          reaches(t->devices[r], t->send[r], t->recv[r], t->count);
        for (const float* in : t->send)
          mnistdp::emu::device_operation_touches("ncclAllReduce", in, t->count * sizeof(float), false);
        for (const float* out : t->recv)
          mnistdp::emu::device_operation_touches("ncclAllReduce", out, t->count * sizeof(float), true);
        std::vector<float> sums(t->count);
        mnistdp::emu::nccl::ring_sum(t->send, 0, t->count, t->count, sums.data());
        for (float* out : t->recv)
          std::memcpy(out, sums.data(), t->count * sizeof(float));
      };
    }
    collective = slot.first;
    table = slot.second;
    if (table->count != count)
      return fail(ncclInvalidUsage, "ranks called ncclAllReduce with different counts");
    table->send[static_cast<std::size_t>(comm->rank)] = send;
    table->recv[static_cast<std::size_t>(comm->rank)] = recv;
    table->devices[static_cast<std::size_t>(comm->rank)] = comm->device;
    {
      std::lock_guard engine_lock(engine.mutex);
      collective->streams[static_cast<std::size_t>(comm->rank)] = s;
    }
    if (++table->calls == clique.ranks) clique.pending.erase(call);
  }
  o.collective = collective;
  return engine.enqueue(s, std::move(o)) == cudaSuccess ? ncclSuccess
                                                        : fail(ncclInvalidUsage, "refused by a capture");
}
