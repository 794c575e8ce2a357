// NCCL over the emulated devices of this process: an all-reduce is one operation per rank, and the engine
// runs them together once every rank's call has reached the head of its stream (engine.hpp), so that ranks
// driven from one thread, or from several, never deadlock. The sum is taken in rank order.
#include <nccl.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/src/engine.hpp"

namespace {

thread_local std::string tls_last_error;
thread_local int tls_group_depth = 0;

struct Table {
  std::vector<const float*> send;
  std::vector<float*> recv;
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

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  int device = 0;
  std::uint64_t calls = 0;
};

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::memset(id->internal, 0, sizeof id->internal);
  std::strncpy(id->internal, "emulated", sizeof id->internal - 1);
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
    comms[r] = new ncclComm{clique, r, d, 0};
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t*) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRankConfig without a communicator to fill");
  *comm = nullptr;
  if (nranks != 1 || rank != 0)
    return fail(ncclInvalidUsage, "a communicator of " + std::to_string(nranks) +
                                      " processes: only a world of one process is emulated");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fail(ncclUnhandledCudaError, "no emulated device");
  auto clique = std::make_shared<Clique>();
  clique->ranks = 1;
  *comm = new ncclComm{clique, 0, device, 0};
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !state) return ncclInvalidArgument;
  *state = ncclSuccess;
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
  if (clique.ranks == 1) {
    o.run = [send, recv, count] {
      mnistdp::emu::device_operation_touches("ncclAllReduce", send, count * sizeof(float), false);
      mnistdp::emu::device_operation_touches("ncclAllReduce", recv, count * sizeof(float), true);
      if (send != recv) std::memmove(recv, send, count * sizeof(float));
    };
    return engine.enqueue(s, std::move(o)) == cudaSuccess ? ncclSuccess
                                                          : fail(ncclInvalidUsage, "refused by a capture");
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
      slot.second->count = count;
      std::shared_ptr<Table> t = slot.second;
      slot.first->run = [t] {
        for (const float* in : t->send)
          mnistdp::emu::device_operation_touches("ncclAllReduce", in, t->count * sizeof(float), false);
        for (const float* out : t->recv)
          mnistdp::emu::device_operation_touches("ncclAllReduce", out, t->count * sizeof(float), true);
        std::vector<float> sums(t->count);
        for (std::size_t i = 0; i < t->count; ++i) {
          float acc = t->send[0][i];
          for (std::size_t r = 1; r < t->send.size(); ++r)
            acc += t->send[r][i];
          sums[i] = acc;
        }
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
