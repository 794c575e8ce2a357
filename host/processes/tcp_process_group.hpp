#pragma once
// A process group over TCP, for launches without MPI (torchrun, srun): rank 0 listens on MASTER_PORT, every
// other rank connects to MASTER_ADDR:MASTER_PORT, and rank 0 is the hub of every collective. A hub costs
// 2 (N - 1) messages of the whole buffer through rank 0 where a ring would spread them, which is nothing next
// to a CPU replica's step for the handful of processes a CPU run uses; GPU runs send their gradients through
// NCCL and use this group only for a few bytes per step.
//
// The sum is taken at rank 0 in rank order, (((x0 + x1) + x2) + ...), as the in-process host communicator
// takes it over replicas: N processes with one replica each compute the very same bits as one process with N
// replicas.
//
// Nothing waits forever: the rendezvous and every collective give up after `timeout`, naming the ranks that
// did not answer; a rank that fails sends its message to rank 0, which passes it on to every other rank; a
// rank that vanishes (killed, crashed) is reported as such by rank 0 to the others.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "host/processes/process_group.hpp"

namespace mnistdp {

struct TcpRendezvous {
  std::string master_addr;  // where rank 0 listens, at master_port (tcp::listen_on)
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{300'000};  // for the rendezvous, and for each collective
  bool listen_on_all = false;  // rank 0 listens on every interface, not on master_addr's alone
  // The run's secret (run_token.hpp): only a process that proves it holds the same token joins, and rank 0
  // proves it back. Empty: anyone who reaches the port may join, which rank 0 says once.
  std::string token;
  // Where the rendezvous says what it did that is no failure (a connection dropped, a rank still retrying);
  // standard error when empty.
  std::function<void(const std::string&)> note;
};

// Returns once every rank has joined. A connection that does not fit (another program, a wrong token, a
// rank or WORLD_SIZE that does not fit, a rank already in, a silent peer) is dropped and noted, and the
// rendezvous goes on; the process at the other end is told why when it speaks mnist-dp's protocol. Throws
// std::runtime_error (a port in use, an address that does not resolve, a rank that never arrives by the
// timeout, this process refused by rank 0) or RemoteRankError.
std::unique_ptr<ProcessGroup> make_tcp_process_group(const TcpRendezvous& rendezvous);

}  // namespace mnistdp
