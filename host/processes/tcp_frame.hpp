#pragma once
// How the TCP process group's messages are laid out on the wire: a FrameHeader, then `bytes` bytes of
// payload. Host byte order: every rank runs the same binary on the same kind of machine. The magic number
// at the start of every header tells a rank of mnist-dp from any other program that reaches its port.
//
// Which frames are sent when is the group's protocol: at the rendezvous (tcp_rendezvous.cpp), a Challenge
// from rank 0 to each connection, a Hello back from every rank, and a Welcome once all have joined, or
// Refused, with the reason, to a process that does not fit; then (tcp_process_group.cpp) Data for each
// collective. An Error, whenever a rank fails, carries its message as text.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "host/processes/run_token.hpp"
#include "host/processes/tcp_socket.hpp"

namespace mnistdp::tcp {

enum class FrameType : std::uint32_t {
  Hello = 1,
  Welcome = 2,
  Data = 3,
  Error = 4,
  Challenge = 5,
  Refused = 6
};
constexpr std::uint32_t kMagic = 0x4d4e4450;  // "MNDP"

struct FrameHeader {
  std::uint32_t magic;
  FrameType type;
  std::int32_t origin;  // for Error: the rank that failed
  std::uint32_t reserved;
  std::uint64_t bytes;
};

// A challenge's payload: rank 0's nonce, which the hello's proof must cover.
struct Challenge {
  Nonce nonce;
};

// A hello's payload: who is connecting, how large it was told the world is, and its proof of the run token.
struct Hello {
  std::int32_t rank;
  std::int32_t world_size;
  std::uint32_t has_token;  // 1: the process was given a run token, and `proof` is made with it
  std::uint32_t reserved;
  Nonce nonce;  // the process's own challenge to rank 0, which the welcome's proof must cover
  Proof proof;  // hello_proof()
};

// A welcome's payload: rank 0's proof of the run token (welcome_proof()); zeros in a run without one.
struct Welcome {
  Proof proof;
};

Proof hello_proof(const std::string& token, const Nonce& challenge, const Hello& hello);
Proof welcome_proof(const std::string& token, const Nonce& challenge, const Hello& hello);

// The longest error text a frame carries; a longer message is cut to it.
constexpr std::size_t kMaxErrorBytes = 64 * 1024;

struct Frame {
  FrameType type = FrameType::Error;
  int origin = -1;
  std::vector<std::byte> payload;

  std::string text() const {
    return std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
  }
};

void send_frame(const Socket& s, FrameType type, int origin, std::span<const std::byte> payload,
                const Deadline& deadline);

// Reads a header; ConnectionLost when it is not mnist-dp's (another program on that port).
FrameHeader receive_header(const Socket& s, const Deadline& deadline);

// Reads the payload that `header`, just received, announces.
Frame receive_payload(const Socket& s, const FrameHeader& header, const Deadline& deadline);

// Reads one whole frame. limit_bytes: the largest payload expected; a larger one means the peer runs
// another program, and is ConnectionLost before anything is allocated for it.
Frame receive_frame(const Socket& s, const Deadline& deadline, std::size_t limit_bytes);

}  // namespace mnistdp::tcp
