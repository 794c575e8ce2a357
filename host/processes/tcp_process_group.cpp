#include "host/processes/tcp_process_group.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace mnistdp {

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int error) {
  return std::strerror(error);
}

// A point in time after which a wait gives up.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds budget) : end_(Clock::now() + budget) {}
  // Milliseconds left, for poll(); 0 once passed.
  int poll_ms() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1'000'000'000LL));
  }
  bool passed() const { return Clock::now() >= end_; }

 private:
  Clock::time_point end_;
};

// Owns a socket's file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Every socket of the group is non-blocking, so that each wait goes through poll() with a deadline, and has
// Nagle's algorithm off: the collectives are request-and-answer, and a small message must not sit waiting
// for an acknowledgement.
void configure(const Socket& s) {
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  if (flags < 0 || ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error(fmt::format("TCP rendezvous: fcntl(O_NONBLOCK): {}", errno_text(errno)));
  // Room for a whole gradient (0.8 MB) in the kernel's buffers, so that a rank's send completes without
  // waiting for the reader to drain it piece by piece. A request the kernel caps is no error.
  const int buffer = 4 << 20;
  static_cast<void>(::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer));
  static_cast<void>(::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer));
  const int one = 1;
  if (::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
    throw std::runtime_error(fmt::format("TCP rendezvous: setsockopt(TCP_NODELAY): {}", errno_text(errno)));
}

// Waits until fd is readable (events = POLLIN) or writable (POLLOUT). False when the deadline passed first.
bool wait_for(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, deadline.poll_ms());
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR)
      throw std::runtime_error(fmt::format("TCP process group: poll: {}", errno_text(errno)));
  }
}

// The connection ended (the peer closed it, or it broke) before a whole message arrived or left.
struct ConnectionLost {
  std::string why;
};
// The deadline passed in the middle of sending or receiving.
struct TimedOut {};

void send_all(const Socket& s, const void* data, std::size_t bytes, const Deadline& deadline) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // MSG_NOSIGNAL: a peer that has gone must be an error here, not a SIGPIPE that kills the process.
    const ssize_t sent = ::send(s.fd(), p, bytes, MSG_NOSIGNAL);
    if (sent > 0) {
      p += sent;
      bytes -= static_cast<std::size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(s.fd(), POLLOUT, deadline)) throw TimedOut{};
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else {
      throw ConnectionLost{errno_text(errno)};
    }
  }
}

void receive_all(const Socket& s, void* data, std::size_t bytes, const Deadline& deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(s.fd(), p, bytes, 0);
    if (got > 0) {
      p += got;
      bytes -= static_cast<std::size_t>(got);
    } else if (got == 0) {
      throw ConnectionLost{"the connection was closed"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(s.fd(), POLLIN, deadline)) throw TimedOut{};
    } else if (errno != EINTR) {
      throw ConnectionLost{errno_text(errno)};
    }
  }
}

// The wire format: a header, then `bytes` bytes of payload. Host byte order: every rank runs the same binary
// on the same kind of machine.
enum class FrameType : std::uint32_t { Hello = 1, Welcome = 2, Data = 3, Error = 4 };
constexpr std::uint32_t kMagic = 0x4d4e4450;  // "MNDP"

struct FrameHeader {
  std::uint32_t magic;
  FrameType type;
  std::int32_t origin;  // for Error: the rank that failed
  std::uint32_t reserved;
  std::uint64_t bytes;
};

// A hello's payload: who is connecting and how large it was told the world is.
struct Hello {
  std::int32_t rank;
  std::int32_t world_size;
};

struct Frame {
  FrameType type = FrameType::Error;
  int origin = -1;
  std::vector<std::byte> payload;

  std::string text() const {
    return std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
  }
};

void send_frame(const Socket& s, FrameType type, int origin, std::span<const std::byte> payload,
                const Deadline& deadline) {
  const FrameHeader header{kMagic, type, origin, 0, payload.size()};
  send_all(s, &header, sizeof header, deadline);
  send_all(s, payload.data(), payload.size(), deadline);
}

// Reads one whole frame. expected_bytes: the payload size a Data frame must have (an Error's text may have
// any size).
Frame receive_frame(const Socket& s, const Deadline& deadline, std::size_t limit_bytes) {
  FrameHeader header{};
  receive_all(s, &header, sizeof header, deadline);
  if (header.magic != kMagic)
    throw ConnectionLost{"it sent something that is not mnist-dp's protocol (another program on that port?)"};
  if (header.bytes > limit_bytes)
    throw ConnectionLost{
        fmt::format("it sent {} bytes where at most {} were expected (ranks running "
                    "different programs?)",
                    header.bytes, limit_bytes)};
  Frame frame{header.type, header.origin, std::vector<std::byte>(header.bytes)};
  receive_all(s, frame.payload.data(), frame.payload.size(), deadline);
  return frame;
}

constexpr std::size_t kMaxErrorBytes = 64 * 1024;

// Ends the connections so that what was last sent on them arrives. A socket closed with unread data in its
// receive buffer sends a reset, and a reset can make the peer's kernel drop data it has not yet read (here,
// the error message it most needs). So: end the sending side, read and drop whatever still arrives until
// each peer closes its side (it does once it has read the message), or until the deadline.
void close_gracefully(const std::vector<Socket*>& sockets, const Deadline& deadline) {
  std::vector<Socket*> open;
  for (Socket* s : sockets)
    if (::shutdown(s->fd(), SHUT_WR) == 0) open.push_back(s);
  char sink[4096];
  while (!open.empty() && !deadline.passed()) {
    std::vector<pollfd> fds;
    for (Socket* s : open)
      fds.push_back({s->fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), deadline.poll_ms()) <= 0) break;
    std::vector<Socket*> still;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) {
        still.push_back(open[i]);
        continue;
      }
      const ssize_t got = ::recv(open[i]->fd(), sink, sizeof sink, 0);
      if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR))) still.push_back(open[i]);
    }
    open = std::move(still);
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

class TcpProcessGroup final : public ProcessGroup {
 public:
  explicit TcpProcessGroup(const TcpRendezvous& r)
      : rank_(r.rank), size_(r.world_size), addr_(r.master_addr), port_(r.master_port), timeout_(r.timeout) {
    if (size_ < 2 || rank_ < 0 || rank_ >= size_)
      throw std::invalid_argument(fmt::format("TCP process group: rank {} of {}", rank_, size_));
    if (rank_ == 0)
      accept_all();
    else
      connect_to_root();
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
        lost(r, errno_text(errno));
      }
      if (static_cast<std::size_t>(got) < sizeof header || header.magic != kMagic ||
          header.type != FrameType::Error)
        continue;
      Frame frame;
      try {
        frame = receive_frame(peers_[i], Deadline(std::chrono::milliseconds(2000)), kMaxErrorBytes);
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
        send_frame(peers_[r], FrameType::Error, origin, payload, deadline);
        told.push_back(&peers_[r]);
      } catch (...) {
        // Best effort: the peer may already have gone.
      }
    }
    close_gracefully(told, deadline);
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
      send_frame(peer(r), type, rank_, payload, deadline);
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
        const Frame last = receive_frame(peer(r), Deadline(std::chrono::milliseconds(500)), kMaxErrorBytes);
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
      FrameHeader header{};
      receive_all(peer(r), &header, sizeof header, deadline);
      if (header.magic != kMagic)
        throw ConnectionLost{
            "it sent something that is not mnist-dp's protocol (another program on that port?)"};
      if (header.type == FrameType::Data && header.bytes == into.size()) {
        receive_all(peer(r), into.data(), into.size(), deadline);
        return;
      }
      if (header.type == FrameType::Error && header.bytes <= kMaxErrorBytes) {
        Frame frame{header.type, header.origin, std::vector<std::byte>(header.bytes)};
        receive_all(peer(r), frame.payload.data(), frame.payload.size(), deadline);
        remote_failure(frame, r);
      }
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
      if (ready < 0) throw std::runtime_error(fmt::format("TCP process group: poll: {}", errno_text(errno)));
      if (ready == 0)
        throw std::runtime_error(
            fmt::format("waited {} s for rank{} {} to reach the same step (hung, or much "
                        "slower?)",
                        seconds(), waiting.size() == 1 ? "" : "s", rank_list(waiting)));
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

  // Rank 0: listens, takes one hello from every other rank, checks it, and welcomes them all at once.
  void accept_all() {
    peers_.resize(static_cast<std::size_t>(size_));
    broken_.assign(peers_.size(), false);
    Socket listener = listen_on_port();
    const Deadline deadline(timeout_);
    std::vector<Socket> unknown;  // connected, hello not read yet
    int joined = 0;
    try {
      while (joined < size_ - 1) {
        std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
        for (const Socket& s : unknown)
          fds.push_back({s.fd(), POLLIN, 0});
        const int ready = ::poll(fds.data(), fds.size(), deadline.poll_ms());
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) throw std::runtime_error(fmt::format("TCP rendezvous: poll: {}", errno_text(errno)));
        if (ready == 0) throw std::runtime_error(missing_ranks_message());
        // Hellos first (their sockets are fds[1..]), then new connections, so that indices stay valid.
        std::vector<Socket> still;
        for (std::size_t i = 1; i < fds.size(); ++i) {
          Socket& s = unknown[i - 1];
          if (fds[i].revents == 0) {
            still.push_back(std::move(s));
            continue;
          }
          if (take_hello(std::move(s))) ++joined;
        }
        unknown = std::move(still);
        if (fds[0].revents != 0) {
          const int fd = ::accept(listener.fd(), nullptr, nullptr);
          if (fd >= 0) {
            Socket s(fd);
            configure(s);
            unknown.push_back(std::move(s));
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            throw std::runtime_error(fmt::format("TCP rendezvous: accept: {}", errno_text(errno)));
          }
        }
      }
      for (int r = 1; r < size_; ++r)
        send_to(r, FrameType::Welcome, {}, deadline);
    } catch (const std::exception& e) {
      // The ranks that did connect are waiting for a welcome: tell them why none will come.
      abort(0, e.what());
      throw;
    }
  }

  // Reads and checks a hello; the socket then belongs to that rank (true). A connection that is not an
  // mnist-dp rank (a health check, a port scan, a stray client) is dropped and the rendezvous goes on
  // (false). A hello that does not fit is answered with the reason, and the rendezvous fails on rank 0 too
  // (abort tells the ranks already in).
  bool take_hello(Socket s) {
    Frame frame;
    try {
      // Short: a rank sends its hello as soon as it connects.
      frame = receive_frame(s, Deadline(std::chrono::milliseconds(5000)), sizeof(Hello));
    } catch (const ConnectionLost&) {
      return false;
    } catch (const TimedOut&) {
      return false;
    }
    Hello hello{};
    if (frame.type != FrameType::Hello || frame.payload.size() != sizeof hello) return false;
    std::memcpy(&hello, frame.payload.data(), sizeof hello);
    std::string refusal;
    if (hello.world_size != size_)
      refusal = fmt::format(
          "rank {} was started with a world of {} processes, rank 0 with {}: every rank must "
          "be given the same WORLD_SIZE",
          hello.rank, hello.world_size, size_);
    else if (hello.rank <= 0 || hello.rank >= size_)
      refusal = fmt::format("a process says it is rank {}, outside 1 to {}", hello.rank, size_ - 1);
    else if (peer(hello.rank).open())
      refusal = fmt::format("two processes say they are rank {}: every rank must be given its own RANK",
                            hello.rank);
    if (!refusal.empty()) {
      try {
        const auto text = std::as_bytes(std::span(refusal.data(), refusal.size()));
        send_frame(s, FrameType::Error, 0, text, Deadline(std::chrono::milliseconds(2000)));
      } catch (...) {
        // It will find out when the connection closes.
      }
      throw std::runtime_error(refusal);
    }
    peers_[static_cast<std::size_t>(hello.rank)] = std::move(s);
    return true;
  }

  std::string missing_ranks_message() const {
    std::vector<int> missing;
    for (int r = 1; r < size_; ++r)
      if (!peer(r).open()) missing.push_back(r);
    return fmt::format(
        "TCP rendezvous on port {}: after {} s, rank{} {} of a world of {} had not joined (were "
        "they started, with the same MASTER_ADDR and MASTER_PORT, and WORLD_SIZE={}?)",
        port_, seconds(), missing.size() == 1 ? "" : "s", rank_list(missing), size_, size_);
  }

  Socket listen_on_port() const {
    // Every interface, as torch's TCPStore does: MASTER_ADDR is how the other ranks find this one, and a
    // name that resolves to a loopback address here (Debian's 127.0.1.1 for the host's own name) would
    // otherwise shut them out.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(port_);
    if (const int rc = ::getaddrinfo(nullptr, port.c_str(), &hints, &found); rc != 0)
      throw std::runtime_error(fmt::format("TCP rendezvous: port {}: {}", port_, ::gai_strerror(rc)));
    std::string why = "no address to listen on";
    Socket listener;
    // IPv6 first when there is one: with IPV6_V6ONLY off it takes IPv4 connections too.
    std::vector<addrinfo*> candidates;
    for (addrinfo* a = found; a; a = a->ai_next)
      candidates.push_back(a);
    std::stable_sort(candidates.begin(), candidates.end(), [](const addrinfo* x, const addrinfo* y) {
      return x->ai_family == AF_INET6 && y->ai_family != AF_INET6;
    });
    for (addrinfo* a : candidates) {
      Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (!s.open()) {
        why = errno_text(errno);
        continue;
      }
      const int one = 1, zero = 0;
      // Both best effort: without the first, a port in TIME_WAIT from the last run is refused as in use;
      // without the second, an IPv6 socket takes no IPv4 connection and the IPv4 address is tried next.
      static_cast<void>(::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
      if (a->ai_family == AF_INET6)
        static_cast<void>(::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero));
      if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), SOMAXCONN) == 0) {
        listener = std::move(s);
        break;
      }
      why = errno == EADDRINUSE ? "the port is in use (by another run, or another program); pick another "
                                  "MASTER_PORT"
                                : errno_text(errno);
    }
    ::freeaddrinfo(found);
    if (!listener.open())
      throw std::runtime_error(
          fmt::format("TCP rendezvous: rank 0 cannot listen on port {} (MASTER_PORT): {}", port_, why));
    const int flags = ::fcntl(listener.fd(), F_GETFL, 0);
    if (flags < 0 || ::fcntl(listener.fd(), F_SETFL, flags | O_NONBLOCK) < 0)
      throw std::runtime_error(fmt::format("TCP rendezvous: fcntl(O_NONBLOCK): {}", errno_text(errno)));
    return listener;
  }

  // Any other rank: connects to rank 0 (retrying while it is not listening yet), says hello, and waits for
  // the welcome that comes when every rank has joined.
  void connect_to_root() {
    peers_.resize(1);
    broken_.assign(1, false);
    const Deadline deadline(timeout_);
    const Deadline welcome_deadline(wait_budget());
    std::string why = "no attempt made";
    while (!peers_[0].open()) {
      if (deadline.passed())
        throw std::runtime_error(
            fmt::format("TCP rendezvous: could not reach rank 0 at {}:{} within {} s ({}); "
                        "is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?",
                        addr_, port_, seconds(), why));
      if (!try_connect(why)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const Hello hello{rank_, size_};
    send_to(0, FrameType::Hello, std::as_bytes(std::span(&hello, 1)), welcome_deadline);
    Frame frame;
    try {
      frame = receive_frame(peer(0), welcome_deadline, kMaxErrorBytes);
    } catch (const ConnectionLost& e) {
      lost(0, e.why);
    } catch (const TimedOut&) {
      throw std::runtime_error(
          fmt::format("TCP rendezvous at {}:{}: rank 0 was reached, but not every rank "
                      "joined within {} s (rank 0 names the missing ones)",
                      addr_, port_, seconds()));
    }
    if (frame.type == FrameType::Error) remote_failure(frame, 0);
    if (frame.type != FrameType::Welcome)
      throw std::runtime_error(
          fmt::format("TCP rendezvous at {}:{}: rank 0 answered out of turn", addr_, port_));
  }

  bool try_connect(std::string& why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(port_);
    if (const int rc = ::getaddrinfo(addr_.c_str(), port.c_str(), &hints, &found); rc != 0) {
      // Retried like a refused connection: a name may resolve only once rank 0's host is up (a pod's DNS
      // record, for one).
      why = fmt::format("MASTER_ADDR {}: {}", addr_, ::gai_strerror(rc));
      return false;
    }
    for (addrinfo* a = found; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (!s.open()) {
        why = errno_text(errno);
        continue;
      }
      // Non-blocking, so that an address that never answers costs seconds, not the kernel's minutes of SYN
      // retries.
      configure(s);
      int error = ::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (error == EINPROGRESS) {
        error = ETIMEDOUT;
        if (wait_for(s.fd(), POLLOUT, Deadline(std::chrono::milliseconds(5000)))) {
          socklen_t length = sizeof error;
          if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &length) < 0) error = errno;
        }
      }
      if (error == 0) {
        peers_[0] = std::move(s);
        break;
      }
      why = errno_text(error);
    }
    ::freeaddrinfo(found);
    return peers_[0].open();
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
