#pragma once
// The sockets under the TCP process group (tcp_process_group.cpp): one object owns each descriptor, and
// every operation that waits is bounded by a Deadline, so that no call here can hang a rank. What these
// functions know is TCP; what the bytes mean is tcp_frame.hpp's, and who talks to whom is the group's.
//
// A connection that fails comes back as ConnectionLost or TimedOut, which the group words with the rank at
// the other end; a failure of this machine (poll, fcntl, a port it cannot listen on) as std::runtime_error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mnistdp::tcp {

// strerror's text for an errno value.
std::string errno_text(int error);

// A point in time after which a wait gives up.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

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

// The connection ended (the peer closed it, or it broke) before a whole message arrived or left.
struct ConnectionLost {
  std::string why;
};
// The deadline passed in the middle of sending or receiving.
struct TimedOut {};

// Sends or receives exactly `bytes` bytes, waiting as often as needed until the deadline. Throws
// ConnectionLost or TimedOut; on either, part of the bytes may have gone or arrived.
void send_all(const Socket& s, const void* data, std::size_t bytes, const Deadline& deadline);
void receive_all(const Socket& s, void* data, std::size_t bytes, const Deadline& deadline);

// A non-blocking socket listening on `port`: of every interface when `addr` is empty, else of the interface
// that has `addr`. An `addr` that is no address of this machine (a name other machines resolve otherwise, a
// cluster's service address), or a name that resolves here to a loopback address other machines cannot reach
// (Debian's 127.0.1.1 for the machine's own name), is listened for on every interface, and `note` then says
// why; it is empty otherwise. Throws std::runtime_error, naming MASTER_PORT, when no address can take it.
Socket listen_on(int port, const std::string& addr, std::string& note);

// What accept_connection took.
struct Accepted {
  Socket socket;     // unopened when there was none after all (the peer gave up in between), or on `error`
  std::string from;  // the peer's address and port, as a message names them
  int error = 0;     // the errno of a failure for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM)
};

// The next connection waiting on `listener`, configured like every socket of the group. Throws
// std::runtime_error on a failure that waiting cannot mend.
Accepted accept_connection(const Socket& listener);

// One attempt to connect to addr:port, trying each address the name resolves to, each for a few seconds.
// An unopened Socket when none answered; `why` then says what the last one met.
Socket try_connect(const std::string& addr, int port, std::string& why);

// Ends the connections so that what was last sent on them arrives. A socket closed with unread data in its
// receive buffer sends a reset, and a reset can make the peer's kernel drop data it has not yet read (here,
// the error message it most needs). So: end the sending side, read and drop whatever still arrives until
// each peer closes its side (it does once it has read the message), or until the deadline.
void close_gracefully(const std::vector<Socket*>& sockets, const Deadline& deadline);

}  // namespace mnistdp::tcp
