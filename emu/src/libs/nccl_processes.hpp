#pragma once
// Communicators across processes (docs/emulation.md, "NCCL across processes"). ncclGetUniqueId creates a
// rendezvous in POSIX shared memory, named by the id; each rank's ncclCommInitRankConfig joins it, and the
// last rank to arrive unlinks the name, so that nothing is left in /dev/shm once every rank has joined (a
// rendezvous that not every rank reached is unlinked when the process that made it exits). Each rank
// owns a slot: an all-reduce publishes its send buffer there, waits for every rank's, sums them in the
// ring's order (nccl_ring.hpp) into its receive buffer and says it is done with the others' slots. The
// waits poll the slots; a peer that died, aborted or left meanwhile is reported as ncclRemoteError, as
// NCCL's proxy reports a connection its peer has closed, and the all-reduce stays held, as NCCL's kernel
// does, until ncclCommAbort ends it.
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace mnistdp::emu::nccl {

// A failure of NCCL's, with the result the call returns.
struct Failure {
  ncclResult_t code = ncclSuccess;
  std::string message;
};

struct LinkError : std::runtime_error {
  LinkError(ncclResult_t c, const std::string& message) : std::runtime_error(message), code(c) {}
  ncclResult_t code;
};

// A new rendezvous, written into `id`. Throws LinkError.
void make_rendezvous(ncclUniqueId& id);

struct Segment;

// One rank's membership of a rendezvous.
class Link {
 public:
  // Joins the rendezvous `id` names as `rank` of `nranks`. Throws LinkError: ncclInvalidArgument for an id
  // that names no rendezvous (not from ncclGetUniqueId, or every rank has joined already), another number of
  // ranks than the others gave, or a rank already taken; ncclInvalidUsage for a second rank of the same
  // rendezvous in one process; ncclSystemError when the shared memory cannot be had.
  static std::shared_ptr<Link> join(const ncclUniqueId& id, int nranks, int rank);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int ranks() const { return nranks_; }
  int rank() const { return rank_; }

  // Whether every rank has joined; a failure of a peer that joined is recorded (failure()).
  bool all_joined();

  // An all-reduce (sum) of `count` floats with every rank, on the engine thread, with device memory open.
  // Returns once every rank's send buffer is summed into `recv`, or, after a failure, once abort() is called:
  // `recv` is then NaN.
  void all_reduce(const float* send, float* recv, std::size_t count);

  // The first failure met, if any.
  std::optional<Failure> failure() const;

  // ncclCommAbort: ends an all-reduce in progress, and tells the peers this rank is gone.
  void abort();
  // ncclCommDestroy: tells the peers this rank is gone.
  void leave();

 private:
  Link() = default;
  template <class Done>
  bool wait(Done done);
  void check_peers();
  void record(ncclResult_t code, const std::string& message);

  std::unique_ptr<Segment> segment_;
  int nranks_ = 0;
  int rank_ = 0;
  std::string name_;
  std::uint64_t round_ = 0;  // pieces of all-reduces so far
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::optional<Failure> failure_;
};

}  // namespace mnistdp::emu::nccl
