#include "host/processes/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace mnistdp::tcp {

namespace {

void set_non_blocking(const Socket& s) {
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  if (flags < 0 || ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error(fmt::format("TCP rendezvous: fcntl(O_NONBLOCK): {}", errno_text(errno)));
}

// Every socket of the group is non-blocking, so that each wait goes through poll() with a deadline, and has
// Nagle's algorithm off: the collectives are request-and-answer, and a small message must not sit waiting
// for an acknowledgement.
void configure(const Socket& s) {
  set_non_blocking(s);
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

}  // namespace

std::string errno_text(int error) {
  return std::strerror(error);
}

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

namespace {

// Binds and listens on `a`: 0, or the errno of the failure.
int bind_and_listen(const addrinfo* a, Socket& listener) {
  Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
  if (!s.open()) return errno;
  const int one = 1, zero = 0;
  // Both best effort: without the first, a port in TIME_WAIT from the last run is refused as in use; without
  // the second, an IPv6 socket of every interface takes no IPv4 connection and the IPv4 address is tried
  // next.
  static_cast<void>(::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  if (a->ai_family == AF_INET6)
    static_cast<void>(::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero));
  if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), SOMAXCONN) != 0) return errno;
  listener = std::move(s);
  return 0;
}

std::string bind_failure(int error) {
  return error == EADDRINUSE
             ? "the port is in use (by another run, or another program); pick another MASTER_PORT"
             : errno_text(error);
}

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127;
  if (address->sa_family == AF_INET6) {
    const in6_addr& a6 = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  }
  return false;
}

// The name says loopback itself: "localhost", or a loopback address written out.
bool names_loopback(const std::string& addr) {
  if (addr == "localhost") return true;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, addr.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return ::inet_pton(AF_INET6, addr.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

using AddressList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

AddressList resolve(const char* host, int port, bool passive, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host, port_text.c_str(), &hints, &found); rc != 0) {
    why = ::gai_strerror(rc);
    return {nullptr, ::freeaddrinfo};
  }
  return {found, ::freeaddrinfo};
}

// Every interface, as torch's TCPStore does. IPv6 first when there is one: with IPV6_V6ONLY off it takes
// IPv4 connections too.
Socket listen_on_every_interface(int port) {
  std::string why = "no address to listen on";
  const AddressList found = resolve(nullptr, port, true, why);
  if (!found) throw std::runtime_error(fmt::format("TCP rendezvous: port {}: {}", port, why));
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* a = found.get(); a; a = a->ai_next)
    candidates.push_back(a);
  std::stable_sort(candidates.begin(), candidates.end(), [](const addrinfo* x, const addrinfo* y) {
    return x->ai_family == AF_INET6 && y->ai_family != AF_INET6;
  });
  Socket listener;
  for (const addrinfo* a : candidates) {
    const int error = bind_and_listen(a, listener);
    if (error == 0) break;
    why = bind_failure(error);
  }
  if (!listener.open())
    throw std::runtime_error(
        fmt::format("TCP rendezvous: rank 0 cannot listen on port {} (MASTER_PORT): {}", port, why));
  return listener;
}

}  // namespace

Socket listen_on(int port, const std::string& addr, std::string& note) {
  note.clear();
  Socket listener;
  if (!addr.empty()) {
    std::string why;
    const AddressList found = resolve(addr.c_str(), port, false, why);
    if (!found) {
      note = fmt::format("MASTER_ADDR {} does not resolve here ({}): rank 0 listens on every interface", addr,
                         why);
    } else {
      const bool loopback_wanted = names_loopback(addr);
      std::string loopback_seen;
      for (const addrinfo* a = found.get(); a && !listener.open(); a = a->ai_next) {
        if (is_loopback(a->ai_addr) && !loopback_wanted) {
          char host[NI_MAXHOST] = "?";
          static_cast<void>(
              ::getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST));
          loopback_seen = host;
          continue;
        }
        // EADDRNOTAVAIL: no interface here has that address; another failure names the port.
        const int error = bind_and_listen(a, listener);
        if (error != 0 && error != EADDRNOTAVAIL)
          throw std::runtime_error(
              fmt::format("TCP rendezvous: rank 0 cannot listen on port {} (MASTER_PORT): {}", port,
                          bind_failure(error)));
      }
      if (!listener.open())
        note =
            loopback_seen.empty()
                ? fmt::format(
                      "MASTER_ADDR {} is no address of this machine: rank 0 listens on every interface", addr)
                : fmt::format(
                      "MASTER_ADDR {} resolves here to {}, which other machines cannot reach: rank 0 "
                      "listens on every interface",
                      addr, loopback_seen);
    }
  }
  if (!listener.open()) listener = listen_on_every_interface(port);
  set_non_blocking(listener);
  return listener;
}

Accepted accept_connection(const Socket& listener) {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  const int fd = ::accept(listener.fd(), reinterpret_cast<sockaddr*>(&peer), &length);
  Accepted accepted;
  if (fd >= 0) {
    accepted.socket = Socket(fd);
    char host[NI_MAXHOST] = "?", service[NI_MAXSERV] = "?";
    static_cast<void>(::getnameinfo(reinterpret_cast<const sockaddr*>(&peer), length, host, sizeof host,
                                    service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV));
    std::string address = host;
    // An IPv4 peer of the IPv6 listener comes as ::ffff:a.b.c.d.
    if (address.rfind("::ffff:", 0) == 0 && address.find('.') != std::string::npos) address.erase(0, 7);
    accepted.from = address.find(':') == std::string::npos ? fmt::format("{}:{}", address, service)
                                                           : fmt::format("[{}]:{}", address, service);
    configure(accepted.socket);
    return accepted;
  }
  if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
    accepted.error = errno;
    return accepted;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
    throw std::runtime_error(fmt::format("TCP rendezvous: accept: {}", errno_text(errno)));
  return accepted;
}

Socket try_connect(const std::string& addr, int port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(addr.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    // Retried like a refused connection: a name may resolve only once rank 0's host is up (a pod's DNS
    // record, for one).
    why = fmt::format("MASTER_ADDR {}: {}", addr, ::gai_strerror(rc));
    return Socket();
  }
  Socket connected;
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
      connected = std::move(s);
      break;
    }
    why = errno_text(error);
  }
  ::freeaddrinfo(found);
  return connected;
}

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

}  // namespace mnistdp::tcp
