#include "host/processes/tcp_frame.hpp"

#include <fmt/format.h>

namespace mnistdp::tcp {

void send_frame(const Socket& s, FrameType type, int origin, std::span<const std::byte> payload,
                const Deadline& deadline) {
  const FrameHeader header{kMagic, type, origin, 0, payload.size()};
  send_all(s, &header, sizeof header, deadline);
  send_all(s, payload.data(), payload.size(), deadline);
}

FrameHeader receive_header(const Socket& s, const Deadline& deadline) {
  FrameHeader header{};
  receive_all(s, &header, sizeof header, deadline);
  if (header.magic != kMagic)
    throw ConnectionLost{"it sent something that is not mnist-dp's protocol (another program on that port?)"};
  return header;
}

Frame receive_payload(const Socket& s, const FrameHeader& header, const Deadline& deadline) {
  Frame frame{header.type, header.origin, std::vector<std::byte>(header.bytes)};
  receive_all(s, frame.payload.data(), frame.payload.size(), deadline);
  return frame;
}

namespace {

template <class T>
std::span<const std::uint8_t> bytes_of(const T& value) {
  return {reinterpret_cast<const std::uint8_t*>(&value), sizeof value};
}

}  // namespace

Proof hello_proof(const std::string& token, const Nonce& challenge, const Hello& hello) {
  return prove(token, "mnist-dp hello",
               {challenge, hello.nonce, bytes_of(hello.rank), bytes_of(hello.world_size)});
}

Proof welcome_proof(const std::string& token, const Nonce& challenge, const Hello& hello) {
  return prove(token, "mnist-dp welcome", {hello.nonce, challenge, bytes_of(hello.rank)});
}

Frame receive_frame(const Socket& s, const Deadline& deadline, std::size_t limit_bytes) {
  const FrameHeader header = receive_header(s, deadline);
  if (header.bytes > limit_bytes)
    throw ConnectionLost{
        fmt::format("it sent {} bytes where at most {} were expected (ranks running "
                    "different programs?)",
                    header.bytes, limit_bytes)};
  return receive_payload(s, header, deadline);
}

}  // namespace mnistdp::tcp
