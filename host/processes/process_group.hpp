#pragma once
// The processes of a multi-process run, as seen from one of them: its rank, the world's size, and the few
// host-side collectives the trainer needs. The gradients of CPU replicas travel through all_reduce_sum; GPU
// replicas send theirs through NCCL and use the group only to share NCCL's unique id and to agree on when to
// stop.
//
// Failure is part of the contract. A rank that fails calls abort() with its message; every other rank's
// next collective then throws RemoteRankError with that message, instead of waiting forever, so that every
// process of the run exits non-zero and says why.
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mnistdp {

// Another rank failed (or vanished); what() is its message.
class RemoteRankError : public std::runtime_error {
 public:
  RemoteRankError(int rank, const std::string& message) : std::runtime_error(message), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How the ranks reach each other, for the start-up report.
  virtual std::string description() const = 0;

  // values: [n], the same n on every rank. Leaves the element-wise sum over the ranks in every rank's values;
  // every rank receives the same bits.
  virtual void all_reduce_sum(std::span<float> values) = 0;
  // True on every rank when it is true on any rank.
  virtual bool any(bool flag) = 0;
  // bytes: [n], the same n on every rank. Rank 0's bytes are copied to every other rank's.
  virtual void broadcast(std::span<std::byte> bytes) = 0;
  // Returns once every rank has called it; throws, as every collective does, when a rank failed instead.
  void barrier() { static_cast<void>(any(false)); }

  // Throws RemoteRankError when another rank has already reported a failure, or vanished; returns at once
  // otherwise. Never waits and never takes a collective's data: for waits outside the group (NCCL's) that
  // should end when a peer does. A group that cannot tell (MPI, where a failure ends the job) does nothing.
  virtual void check_for_failure() {}

  // Tells the other ranks that the run has failed, on rank `origin` (this one, or the one whose
  // RemoteRankError is being passed on), with this message. Best effort; never throws. The group cannot be
  // used afterwards (with MPI, it ends the job).
  virtual void abort(int origin, const std::string& message) noexcept = 0;
};

// Rank 0's text, on every rank.
std::string broadcast_string(ProcessGroup& group, const std::string& text);

// One setting of the run, as a rank was started with it: {"--lr", "0.01"}.
struct Setting {
  std::string name;
  std::string value;
};

// Throws on every rank when any setting is not the same on every rank (settings: the same names in the same
// order on every rank). The rank that differs names itself, the first setting it differs in and both values.
void require_same_on_all_ranks(ProcessGroup& group, const std::vector<Setting>& settings);

}  // namespace mnistdp
