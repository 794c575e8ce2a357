#pragma once
// The TCP process group's rendezvous (tcp_process_group.hpp): how rank 0 admits the other ranks, and how they
// join it. Rank 0 sends every connection a fresh nonce; a rank answers with its hello, proved with the run
// token over that nonce, and its own nonce, which rank 0's welcome proves back once every rank is in.
//
// Rank 0 never waits on one connection: every connection has its own deadline, reads never block, the
// connections that have not yet said hello are capped, and running out of file descriptors drops the oldest
// of them rather than ending the run. What does not fit is dropped, noted with its address, and told why
// when it speaks mnist-dp's protocol; the rendezvous ends at the timeout, whatever arrives.
#include <string>
#include <vector>

#include "host/processes/tcp_process_group.hpp"
#include "host/processes/tcp_socket.hpp"

namespace mnistdp::tcp {

// Rank 0: listens at r.master_port and fills peers[1 .. world_size - 1] as the ranks join; returns once all
// have, each welcomed. Throws std::runtime_error; the ranks already in are then in `peers`, waiting, for the
// caller to tell.
void accept_ranks(const TcpRendezvous& r, std::vector<Socket>& peers);

// Any other rank: the connection to rank 0, once rank 0 has welcomed this rank (and proved the token).
// Retries while rank 0 cannot be reached. Throws std::runtime_error or RemoteRankError.
Socket join_rank_0(const TcpRendezvous& r);

// "1", "1-3", "1-3, 7, 9-12": ranks in increasing order, runs written as ranges.
std::string rank_ranges(const std::vector<int>& ranks);

}  // namespace mnistdp::tcp
