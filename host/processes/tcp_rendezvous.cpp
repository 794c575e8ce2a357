#include "host/processes/tcp_rendezvous.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <thread>
#include <utility>

#include "host/processes/process_group.hpp"
#include "host/processes/tcp_frame.hpp"

namespace mnistdp::tcp {

namespace {

using std::chrono::milliseconds;

// How long a connection has, from its accept, to say its hello: a rank says it at once.
constexpr milliseconds kHelloWithin{5000};
// The most connections that have not said hello yet; one more drops the oldest of them.
constexpr std::size_t kMaxUnfinished = 64;
// Dropped connections noted one by one; past this many, only their count, at the end.
constexpr int kDropsNoted = 20;

double seconds(milliseconds t) {
  return static_cast<double>(t.count()) / 1000.0;
}

void note(const TcpRendezvous& r, const std::string& text) {
  if (r.note)
    r.note(text);
  else
    std::fprintf(stderr, "%s\n", text.c_str());
}

template <class T>
std::span<const std::byte> bytes_of(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}

std::span<const std::byte> text_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// A connection rank 0 has accepted that has not yet proved itself a rank.
struct Unfinished {
  Socket socket;
  std::string from;
  Deadline deadline{kHelloWithin};
  Nonce challenge{};
  std::array<std::byte, sizeof(FrameHeader) + sizeof(Hello)> bytes{};  // the hello frame, as it arrives
  std::size_t got = 0;
};

class Admission {
 public:
  Admission(const TcpRendezvous& r, std::vector<Socket>& peers) : r_(r), peers_(peers) {}

  void run() {
    peers_.resize(static_cast<std::size_t>(r_.world_size));
    reserve_descriptors();
    std::string where_note;
    const Socket listener =
        listen_on(r_.master_port, r_.listen_on_all ? std::string() : r_.master_addr, where_note);
    if (!where_note.empty()) note(r_, "TCP rendezvous: " + where_note);
    if (r_.token.empty())
      note(r_,
           fmt::format("TCP rendezvous: no run token (MNISTDP_RUN_TOKEN): any process that can reach port {} "
                       "can join this run as a rank (docs/multi-node.md, \"Security\")",
                       r_.master_port));
    const Deadline deadline(r_.timeout);
    while (joined_ < r_.world_size - 1) {
      if (deadline.passed()) throw std::runtime_error(missing_ranks_message());
      std::vector<pollfd> fds{{listener.fd(), static_cast<short>(starved_ ? 0 : POLLIN), 0}};
      int wait_ms = deadline.poll_ms();
      for (const Unfinished& u : unfinished_) {
        fds.push_back({u.socket.fd(), POLLIN, 0});
        wait_ms = std::min(wait_ms, u.deadline.poll_ms());
      }
      // Out of descriptors with none of ours to give back: look again shortly rather than spin.
      if (starved_) wait_ms = std::min(wait_ms, 50);
      const int ready = ::poll(fds.data(), fds.size(), wait_ms);
      if (ready < 0 && errno != EINTR)
        throw std::runtime_error(fmt::format("TCP rendezvous: poll: {}", errno_text(errno)));
      starved_ = false;
      // The hellos first (fds[1..] are unfinished_ in order), then the connections past their time, then new
      // ones, so that the indices stay valid.
      std::deque<Unfinished> still;
      for (std::size_t i = 0; i < unfinished_.size(); ++i) {
        Unfinished& u = unfinished_[i];
        if (ready > 0 && fds[i + 1].revents != 0 && !read_hello(u)) continue;
        if (u.socket.open() && u.deadline.passed()) {
          drop(u, fmt::format("it said no hello within {} s", seconds(kHelloWithin)), false);
          continue;
        }
        if (u.socket.open()) still.push_back(std::move(u));
      }
      unfinished_ = std::move(still);
      if (ready > 0 && (fds[0].revents & POLLIN) != 0) take_connections(listener);
    }
    for (int r = 1; r < r_.world_size; ++r)
      send_frame(peers_[static_cast<std::size_t>(r)], FrameType::Welcome, 0, bytes_of(welcomes_[r]),
                 deadline);
    if (dropped_ > kDropsNoted)
      note(r_, fmt::format("TCP rendezvous: {} connections dropped in all ({} not noted one by one)",
                           dropped_, dropped_ - kDropsNoted));
  }

 private:
  // Rank 0 holds a connection to every rank, and up to kMaxUnfinished more while they arrive: a world that
  // needs more descriptors than this process may open is refused before anyone waits on it. The soft limit
  // (1024 on most systems) is raised toward the hard one first, as far as the world needs.
  void reserve_descriptors() const {
    const auto needed =
        static_cast<rlim_t>(r_.world_size) + kMaxUnfinished + 64;  // 64: the rest of the process
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
        limit.rlim_cur >= needed)
      return;
    if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= needed) {
      limit.rlim_cur = needed;
      if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) return;
    }
    throw std::runtime_error(
        fmt::format("TCP rendezvous: a world of {} processes needs about {} file descriptors on rank 0 (one "
                    "for each rank), "
                    "and this process may open {} (ulimit -n): raise the limit, or use fewer processes",
                    r_.world_size, needed, limit.rlim_max));
  }

  // Accepts what is waiting, a few at a time, so that the hellos are read between them.
  void take_connections(const Socket& listener) {
    for (int n = 0; n < 16; ++n) {
      Accepted a = accept_connection(listener);
      if (a.error != 0) {
        if (!said_starved_)
          note(r_,
               fmt::format("TCP rendezvous: accept: {}: the oldest connections that have not said hello are "
                           "dropped to make room",
                           errno_text(a.error)));
        said_starved_ = true;
        if (unfinished_.empty()) {
          starved_ = true;
        } else {
          drop(unfinished_.front(), "rank 0 ran out of file descriptors", false);
          unfinished_.pop_front();
        }
        return;
      }
      if (!a.socket.open()) return;
      if (unfinished_.size() >= kMaxUnfinished) {
        drop(unfinished_.front(),
             fmt::format("more than {} connections had not said hello; the oldest went", kMaxUnfinished),
             false);
        unfinished_.pop_front();
      }
      Unfinished u;
      u.socket = std::move(a.socket);
      u.from = std::move(a.from);
      u.challenge = fresh_nonce();
      try {
        send_frame(u.socket, FrameType::Challenge, 0, bytes_of(Challenge{u.challenge}),
                   Deadline(milliseconds(0)));
      } catch (const ConnectionLost& e) {
        drop(u, e.why, false);
        continue;
      } catch (const TimedOut&) {
        drop(u, "it took no challenge", false);
        continue;
      }
      unfinished_.push_back(std::move(u));
    }
  }

  // Reads what has arrived of u's hello, without waiting. False when u is done with: dropped or admitted.
  bool read_hello(Unfinished& u) {
    const ssize_t got = ::recv(u.socket.fd(), u.bytes.data() + u.got, u.bytes.size() - u.got, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (got < 0) return drop(u, errno_text(errno), false);
    if (got == 0) return drop(u, "it closed the connection before its hello", false);
    u.got += static_cast<std::size_t>(got);
    if (u.got >= sizeof(FrameHeader)) {
      FrameHeader header{};
      std::memcpy(&header, u.bytes.data(), sizeof header);
      if (header.magic != kMagic || header.type != FrameType::Hello || header.bytes != sizeof(Hello))
        return drop(u, "it does not speak mnist-dp's protocol", false);
    }
    if (u.got < u.bytes.size()) return true;
    Hello hello{};
    std::memcpy(&hello, u.bytes.data() + sizeof(FrameHeader), sizeof hello);
    const std::string refusal = check(u, hello);
    if (!refusal.empty()) return drop(u, refusal, true);
    peers_[static_cast<std::size_t>(hello.rank)] = std::move(u.socket);
    welcomes_.resize(static_cast<std::size_t>(r_.world_size));
    welcomes_[static_cast<std::size_t>(hello.rank)] =
        Welcome{r_.token.empty() ? Proof{} : welcome_proof(r_.token, u.challenge, hello)};
    ++joined_;
    return false;
  }

  // Why a hello does not fit, or "". The token first: a process that cannot prove it learns nothing more.
  std::string check(const Unfinished& u, const Hello& hello) const {
    const bool mine = !r_.token.empty();
    if (mine && hello.has_token == 0)
      return "it has no run token, and rank 0 has one: give every rank the same MNISTDP_RUN_TOKEN (or "
             "MNISTDP_RUN_TOKEN_FILE)";
    if (!mine && hello.has_token != 0)
      return "it has a run token, and rank 0 has none: give every rank the same MNISTDP_RUN_TOKEN (or "
             "MNISTDP_RUN_TOKEN_FILE)";
    if (mine && !same_proof(hello.proof, hello_proof(r_.token, u.challenge, hello)))
      return "its run token is not rank 0's";
    if (hello.world_size != r_.world_size)
      return fmt::format(
          "it was started with a world of {} processes, rank 0 with {}: every rank must be given the same "
          "WORLD_SIZE",
          hello.world_size, r_.world_size);
    if (hello.rank <= 0 || hello.rank >= r_.world_size)
      return fmt::format("it says it is rank {}, outside 1 to {}", hello.rank, r_.world_size - 1);
    if (peers_[static_cast<std::size_t>(hello.rank)].open())
      return fmt::format("rank {} has joined already: every rank must be given its own RANK", hello.rank);
    return {};
  }

  // Closes u's connection, noting why; `tell`: u spoke the protocol, and is sent the reason first (at once,
  // or not at all: nothing here waits on it). Returns false, for read_hello.
  bool drop(Unfinished& u, const std::string& why, bool tell) {
    if (tell) {
      try {
        send_frame(u.socket, FrameType::Refused, 0, text_bytes(why), Deadline(milliseconds(0)));
      } catch (const ConnectionLost&) {
      } catch (const TimedOut&) {
      }
      static_cast<void>(::shutdown(u.socket.fd(), SHUT_WR));
    }
    u.socket.reset();
    if (++dropped_ <= kDropsNoted)
      note(r_, fmt::format("TCP rendezvous: dropped a connection from {}: {}", u.from, why));
    return false;
  }

  std::string missing_ranks_message() const {
    std::vector<int> missing;
    for (int r = 1; r < r_.world_size; ++r)
      if (!peers_[static_cast<std::size_t>(r)].open()) missing.push_back(r);
    return fmt::format(
        "TCP rendezvous on port {}: after {} s, rank{} {} of a world of {} had not joined (were they "
        "started, "
        "with the same MASTER_ADDR and MASTER_PORT, and WORLD_SIZE={}?)",
        r_.master_port, seconds(r_.timeout), missing.size() == 1 ? "" : "s", rank_ranges(missing),
        r_.world_size, r_.world_size);
  }

  const TcpRendezvous& r_;
  std::vector<Socket>& peers_;
  std::vector<Welcome> welcomes_;
  std::deque<Unfinished> unfinished_;
  int joined_ = 0;
  int dropped_ = 0;
  bool starved_ = false;       // accept found no descriptor free, and none of ours could be given back
  bool said_starved_ = false;  // noted once
};

}  // namespace

void accept_ranks(const TcpRendezvous& r, std::vector<Socket>& peers) {
  Admission(r, peers).run();
}

Socket join_rank_0(const TcpRendezvous& r) {
  const std::string where = fmt::format("{}:{}", r.master_addr, r.master_port);
  const Deadline deadline(r.timeout);
  const Deadline welcome_deadline(r.timeout + milliseconds(5000));  // rank 0 gives up first, and says why
  const auto start = Deadline::Clock::now();
  std::string why = "no attempt made";
  bool said_retrying = false;
  for (;;) {
    if (deadline.passed())
      throw std::runtime_error(fmt::format(
          "TCP rendezvous: could not reach rank 0 at {} within {} s ({}); is rank 0 running, with the "
          "same MASTER_ADDR and MASTER_PORT?",
          where, seconds(r.timeout), why));
    if (!said_retrying && Deadline::Clock::now() - start > milliseconds(5000)) {
      note(r, fmt::format("TCP rendezvous: rank {} is still trying to reach rank 0 at {} ({})", r.rank, where,
                          why));
      said_retrying = true;
    }
    Socket s = try_connect(r.master_addr, r.master_port, why);
    if (!s.open()) {
      std::this_thread::sleep_for(milliseconds(100));
      continue;
    }
    Frame challenge;
    try {
      challenge = receive_frame(s, Deadline(std::min(milliseconds(deadline.poll_ms()), kHelloWithin)),
                                kMaxErrorBytes);
    } catch (const ConnectionLost& e) {
      why = "rank 0 closed the connection before its challenge: " + e.why;  // too many at once: try again
      std::this_thread::sleep_for(milliseconds(100));
      continue;
    } catch (const TimedOut&) {
      why = "what answers sent no challenge (another program on that port?)";
      continue;
    }
    if (challenge.type != FrameType::Challenge || challenge.payload.size() != sizeof(Challenge)) {
      why = "what answers sent no challenge (another program on that port?)";
      std::this_thread::sleep_for(milliseconds(100));
      continue;
    }
    Challenge c{};
    std::memcpy(&c, challenge.payload.data(), sizeof c);
    Hello hello{r.rank, r.world_size, r.token.empty() ? 0u : 1u, 0, fresh_nonce(), Proof{}};
    if (!r.token.empty()) hello.proof = hello_proof(r.token, c.nonce, hello);
    Frame answer;
    try {
      send_frame(s, FrameType::Hello, r.rank, bytes_of(hello), welcome_deadline);
      answer = receive_frame(s, welcome_deadline, kMaxErrorBytes);
    } catch (const ConnectionLost& e) {
      throw RemoteRankError(0,
                            fmt::format("the connection to rank 0 at {} was lost: {} (rank 0 exited, crashed "
                                        "or was killed)",
                                        where, e.why));
    } catch (const TimedOut&) {
      throw std::runtime_error(fmt::format(
          "TCP rendezvous at {}: rank 0 was reached, but not every rank joined within {} s (rank 0 "
          "names the missing ones)",
          where, seconds(r.timeout)));
    }
    if (answer.type == FrameType::Refused)
      throw std::runtime_error(fmt::format("TCP rendezvous at {}: rank 0 refused this process (rank {}): {}",
                                           where, r.rank, answer.text()));
    if (answer.type == FrameType::Error)
      throw RemoteRankError(
          0, answer.origin == 0 ? fmt::format("rank 0 failed: {}", answer.text()) : answer.text());
    if (answer.type != FrameType::Welcome || answer.payload.size() != sizeof(Welcome))
      throw std::runtime_error(fmt::format("TCP rendezvous at {}: rank 0 answered out of turn", where));
    Welcome welcome{};
    std::memcpy(&welcome, answer.payload.data(), sizeof welcome);
    if (!r.token.empty() && !same_proof(welcome.proof, welcome_proof(r.token, c.nonce, hello)))
      throw std::runtime_error(
          fmt::format("TCP rendezvous at {}: what answers as rank 0 does not prove this run's token: another "
                      "program, or a "
                      "run with another MNISTDP_RUN_TOKEN, holds MASTER_PORT",
                      where));
    return s;
  }
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace mnistdp::tcp
