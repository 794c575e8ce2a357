#include "host/processes/tcp_process_group.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <utility>
#include <vector>

#include "host/processes/tcp_frame.hpp"
#include "host/processes/tcp_rendezvous.hpp"
#include "host/processes/tcp_socket.hpp"

namespace mnistdp {

namespace {

using tcp::ConnectionLost;
using tcp::Deadline;
using tcp::Frame;
using tcp::FrameHeader;
using tcp::FrameType;
using tcp::kMagic;
using tcp::kMaxErrorBytes;
using tcp::Socket;
using tcp::TimedOut;

class TcpProcessGroup final : public ProcessGroup {
 public:
  explicit TcpProcessGroup(const TcpRendezvous& r)
      : rank_(r.rank), size_(r.world_size), addr_(r.master_addr), port_(r.master_port), timeout_(r.timeout) {
    if (size_ < 2 || rank_ < 0 || rank_ >= size_)
      throw std::invalid_argument(fmt::format("TCP process group: rank {} of {}", rank_, size_));
    if (rank_ == 0) {
      peers_.resize(static_cast<std::size_t>(size_));
      broken_.assign(peers_.size(), false);
      try {
        tcp::accept_ranks(r, peers_);
      } catch (const std::exception& e) {
        // The ranks that did join are waiting for a welcome: tell them why none will come.
        abort(0, e.what());
        throw;
      }
    } else {
      peers_.resize(1);
      broken_.assign(1, false);
      peers_[0] = tcp::join_rank_0(r);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override {
    return fmt::format("TCP through rank 0 at {}:{}, {} ranks", addr_, port_, size_);
  }

  void all_reduce_sum(std::span<float> values) override {
    exchange(std::as_writable_bytes(values), [&values](int, std::span<const std::byte> part) {
      const auto* other = reinterpret_cast<const float*>(part.data());
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] += other[i];
    });
  }

  bool any(bool flag) override {
    std::byte mine{static_cast<unsigned char>(flag ? 1 : 0)};
    exchange(std::span(&mine, 1), [&mine](int, std::span<const std::byte> part) { mine |= part[0]; });
    return mine != std::byte{0};
  }

  void broadcast(std::span<std::byte> bytes) override {
    const Deadline deadline(wait_budget());
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r)
        send_to(r, FrameType::Data, bytes, deadline);
    } else {
      receive_data_from_root(bytes, deadline);
    }
  }

  // Looks, without waiting, at what has arrived: an Error frame or a closed connection is a failure to report
  // now; a Data frame (a rank already at the next collective) is left where it is.
  void check_for_failure() override {
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const int r = static_cast<int>(i);
      if (!peers_[i].open() || broken_[i] || (rank_ == 0 && r == 0)) continue;
      pollfd p{peers_[i].fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      FrameHeader header{};
      const ssize_t got = ::recv(peers_[i].fd(), &header, sizeof header, MSG_PEEK | MSG_DONTWAIT);
      if (got == 0) lost(r, "the connection was closed");
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        lost(r, tcp::errno_text(errno));
      }
      if (static_cast<std::size_t>(got) < sizeof header || header.magic != kMagic ||
          header.type != FrameType::Error)
        continue;
      Frame frame;
      try {
        frame = tcp::receive_frame(peers_[i], Deadline(std::chrono::milliseconds(2000)), kMaxErrorBytes);
      } catch (const ConnectionLost& e) {
        broken_[i] = true;
        lost(r, e.why);
      } catch (const TimedOut&) {
        broken_[i] = true;
        lost(r, "its message stopped half-way");
      }
      remote_failure(frame, r);
    }
  }

  void abort(int origin, const std::string& message) noexcept override {
    // A short grace for the message to leave; a peer that is gone or stuck must not hold this rank up.
    const Deadline deadline(std::chrono::milliseconds(2000));
    const auto text = std::as_bytes(std::span(message.data(), message.size()));
    const auto payload = text.first(std::min(text.size(), kMaxErrorBytes));
    std::vector<Socket*> told;
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (static_cast<int>(r) == origin || !peers_[r].open() || broken_[r]) continue;
      try {
        tcp::send_frame(peers_[r], FrameType::Error, origin, payload, deadline);
        told.push_back(&peers_[r]);
      } catch (...) {
        // Best effort: the peer may already have gone.
      }
    }
    tcp::close_gracefully(told, deadline);
    for (Socket& s : peers_)
      s.reset();
  }

 private:
  // The rank that peers_[r] leads to: rank r on rank 0; rank 0 (peers_[0]) elsewhere.
  const Socket& peer(int r) const { return peers_[static_cast<std::size_t>(r)]; }

  [[noreturn]] void lost(int r, const std::string& why) const {
    if (rank_ == 0)
      throw RemoteRankError(r,
                            fmt::format("rank {} vanished: {} (it exited, crashed or was killed)", r, why));
    throw RemoteRankError(0, fmt::format("the connection to rank 0 at {}:{} was lost: {} (rank 0 exited, "
                                         "crashed or was killed)",
                                         addr_, port_, why));
  }

  void send_to(int r, FrameType type, std::span<const std::byte> payload, const Deadline& deadline) {
    try {
      tcp::send_frame(peer(r), type, rank_, payload, deadline);
    } catch (...) {
      // Part of a frame may have left: nothing more may be written on this connection (abort's message would
      // land inside the unfinished frame and be read as data).
      broken_[static_cast<std::size_t>(r)] = true;
      rethrow_send_failure(r);
    }
  }

  [[noreturn]] void rethrow_send_failure(int r) {
    try {
      throw;
    } catch (const ConnectionLost& e) {
      // A peer that failed sends its reason and then closes; the reason may be waiting to be read.
      try {
        const Frame last =
            tcp::receive_frame(peer(r), Deadline(std::chrono::milliseconds(500)), kMaxErrorBytes);
        if (last.type == FrameType::Error) remote_failure(last, r);
      } catch (const ConnectionLost&) {
      } catch (const TimedOut&) {
      }
      lost(r, e.why);
    } catch (const TimedOut&) {
      throw std::runtime_error(
          fmt::format("rank {} did not take its data within {} s (is it hung?)", r, seconds()));
    }
  }

  // A Data frame from rank 0 into `into` (exactly its size); rank 0's Error frame becomes RemoteRankError.
  void receive_data_from_root(std::span<std::byte> into, const Deadline& deadline) {
    receive_data(
        0, into, deadline,
        fmt::format("rank 0 at {}:{} did not answer within {} s (it, or another rank, is hung or much "
                    "slower)",
                    addr_, port_, seconds()));
  }

  // A failure reported by rank `from`: its own (worded here), or one it passes on (worded by rank 0 already).
  [[noreturn]] static void remote_failure(const Frame& frame, int from) {
    if (frame.origin == from)
      throw RemoteRankError(frame.origin, fmt::format("rank {} failed: {}", frame.origin, frame.text()));
    throw RemoteRankError(frame.origin, frame.text());
  }

  // Reads a Data frame of exactly `into.size()` bytes from rank r straight into `into` (the gradient buffer
  // itself: no copy, no allocation); an Error frame becomes RemoteRankError, anything else a protocol error.
  void receive_data(int r, std::span<std::byte> into, const Deadline& deadline,
                    const std::string& on_timeout) {
    try {
      const FrameHeader header = tcp::receive_header(peer(r), deadline);
      if (header.type == FrameType::Data && header.bytes == into.size()) {
        tcp::receive_all(peer(r), into.data(), into.size(), deadline);
        return;
      }
      if (header.type == FrameType::Error && header.bytes <= kMaxErrorBytes)
        remote_failure(tcp::receive_payload(peer(r), header, deadline), r);
      throw std::runtime_error(fmt::format(
          "rank {} sent a message of {} bytes where {} bytes of data were expected: the ranks are "
          "not running the same collectives",
          r, header.bytes, into.size()));
    } catch (const ConnectionLost& e) {
      broken_[static_cast<std::size_t>(r)] = true;
      lost(r, e.why);
    } catch (const TimedOut&) {
      broken_[static_cast<std::size_t>(r)] = true;
      throw std::runtime_error(on_timeout);
    }
  }

  // The shape of every collective: each rank sends its bytes to rank 0; rank 0 folds them into its own in
  // rank order (combine(r, rank r's bytes)) and sends the result back to every rank.
  template <typename Combine>
  void exchange(std::span<std::byte> mine, Combine combine) {
    const Deadline deadline(wait_budget());
    if (rank_ != 0) {
      send_to(0, FrameType::Data, mine, deadline);
      receive_data_from_root(mine, deadline);
      return;
    }
    // Rank 0 reads whichever rank is ready first, so that a rank that failed is heard at once even while
    // another is still computing; the fold then runs in rank order, whatever the arrival order was.
    // One buffer per rank, kept from one collective to the next: the gradient's 0.8 MB every step.
    parts_.resize(static_cast<std::size_t>(size_));
    std::vector<int> waiting;
    for (int r = 1; r < size_; ++r)
      waiting.push_back(r);
    while (!waiting.empty()) {
      std::vector<pollfd> fds;
      for (int r : waiting)
        fds.push_back({peer(r).fd(), POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), deadline.poll_ms());
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0)
        throw std::runtime_error(fmt::format("TCP process group: poll: {}", tcp::errno_text(errno)));
      if (ready == 0)
        throw std::runtime_error(
            fmt::format("waited {} s for rank{} {} to reach the same step (hung, or much "
                        "slower?)",
                        seconds(), waiting.size() == 1 ? "" : "s", tcp::rank_ranges(waiting)));
      std::vector<int> still;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        const int r = waiting[i];
        if (fds[i].revents == 0) {
          still.push_back(r);
          continue;
        }
        std::vector<std::byte>& part = parts_[static_cast<std::size_t>(r)];
        part.resize(mine.size());
        receive_data(r, part, deadline,
                     fmt::format("rank {} began a message and did not finish it within {} s", r, seconds()));
      }
      waiting = std::move(still);
    }
    for (int r = 1; r < size_; ++r)
      combine(r, parts_[static_cast<std::size_t>(r)]);
    // The answers get a deadline of their own: a rank that arrived late must not leave the others too little
    // time to take them.
    const Deadline answer_deadline(timeout_);
    for (int r = 1; r < size_; ++r)
      send_to(r, FrameType::Data, mine, answer_deadline);
  }

  double seconds() const { return static_cast<double>(timeout_.count()) / 1000.0; }

  // How long a wait may last. Rank 0 waits `timeout`; the others wait a few seconds more, so that when some
  // rank is hung, rank 0, which knows which one, gives up first and its message reaches them all.
  std::chrono::milliseconds wait_budget() const {
    return rank_ == 0 ? timeout_ : timeout_ + std::chrono::milliseconds(5000);
  }

  int rank_;
  int size_;
  std::string addr_;
  int port_;
  std::chrono::milliseconds timeout_;
  // On rank 0: peers_[r] is the connection to rank r (peers_[0] unused). Elsewhere: peers_[0], to rank 0.
  std::vector<Socket> peers_;
  std::vector<bool> broken_;  // [peers_.size()]: a frame was cut short on that connection; write nothing more
  std::vector<std::vector<std::byte>> parts_;  // on rank 0: [ranks][bytes], what each rank sent last
};

}  // namespace

std::unique_ptr<ProcessGroup> make_tcp_process_group(const TcpRendezvous& rendezvous) {
  return std::make_unique<TcpProcessGroup>(rendezvous);
}

}  // namespace mnistdp
