#include "cohort/rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/store_util.h"
#include "cohort/rendezvous/wire.h"

namespace cohort::rendezvous {
namespace {

using detail::Clock;
using wire::Op;
using wire::Status;

// A client gives the server this long beyond a blocking call's own timeout
// before it concludes the server is stuck.
constexpr Duration kReplyGrace = std::chrono::seconds(10);
// After refusing a stranger the server lingers this long for it to read the
// refusal, so that closing does not turn the reply into a reset.
constexpr Duration kDrainTime = std::chrono::seconds(2);
// A client that stops reading its replies is dropped past this backlog.
constexpr size_t kMaxPendingOutput = size_t{256} << 20;
constexpr const char* kRefusedSecret =
    "authentication failed: the client's secret does not match the store's";

std::string errno_text(int e) { return std::strerror(e); }

std::string endpoint(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string peer_name(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "<unknown peer>";
  return endpoint(host, std::atoi(serv));
}

void set_socket_options(int fd) {
  const int one = 1;
  // Requests and replies are small and latency-bound: never wait for Nagle.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Lets a dead peer's connection eventually fail instead of lingering.
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) ::freeaddrinfo(head);
  }
};

int poll_ms(Clock::time_point deadline) {
  const auto left = detail::remaining(deadline).count();
  return static_cast<int>(std::min<int64_t>(left, 1000));
}

// Blocking-style I/O on a non-blocking socket, bounded by `deadline`.
// Return false with `error` set on failure ("" means end of stream).
bool write_all(int fd, std::string_view data, Clock::time_point deadline, std::string& error) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) {
        error = "timed out sending";
        return false;
      }
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, poll_ms(deadline));
      continue;
    }
    error = errno_text(errno);
    return false;
  }
  return true;
}

bool read_exact(int fd, char* out, size_t size, Clock::time_point deadline, std::string& error) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::recv(fd, out + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      error = "connection closed";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Clock::now() >= deadline) {
        error = "timed out waiting for the store's answer";
        return false;
      }
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, poll_ms(deadline));
      continue;
    }
    error = errno_text(errno);
    return false;
  }
  return true;
}

std::optional<std::string> read_frame(int fd, uint32_t max_bytes, Clock::time_point deadline,
                                      std::string& error) {
  char header[4];
  if (!read_exact(fd, header, 4, deadline, error)) return std::nullopt;
  const uint32_t len = wire::decode_u32(header);
  if (len > max_bytes) {
    error = "frame of " + std::to_string(len) + " bytes";
    return std::nullopt;
  }
  std::string payload(len, '\0');
  if (!read_exact(fd, payload.data(), len, deadline, error)) return std::nullopt;
  return payload;
}

}  // namespace

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

struct TcpStoreServer::Impl {
  // epoll user data: these two, or a connection id.
  static constexpr uint64_t kListenId = 0;
  static constexpr uint64_t kWakeId = 1;

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;
    std::string nonce;
    bool authenticated = false;
    bool draining = false;   // refused: flush the refusal, then close
    bool write_shut = false;
    bool dead = false;
    bool want_write = false;  // EPOLLOUT registered
    Clock::time_point deadline;  // to authenticate, or to finish draining
    std::string in;
    std::string out;
    size_t out_off = 0;
    std::vector<uint64_t> waiters;
  };

  // A get or wait parked until its keys exist or its deadline passes.
  struct Waiter {
    uint64_t conn = 0;
    uint64_t request = 0;
    Op op = Op::get;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  TcpStoreServerOptions options;
  std::string where;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::thread thread;

  // Everything below belongs to the event-loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t next_conn = 2;
  std::vector<uint64_t> closed;
  std::vector<uint64_t> dirty;
  std::unordered_map<std::string, Bytes> data;
  std::unordered_map<uint64_t, Waiter> waiters;
  uint64_t next_waiter = 1;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_by_key;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines;
  bool accept_paused = false;
  Clock::time_point accept_resume;

  explicit Impl(TcpStoreServerOptions o) : options(std::move(o)) {
    try {
      listen();
      epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
      COHORT_CHECK(epoll_fd >= 0) << "epoll_create1: " << errno_text(errno);
      wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      COHORT_CHECK(wake_fd >= 0) << "eventfd: " << errno_text(errno);
      watch(listen_fd, kListenId, EPOLLIN);
      watch(wake_fd, kWakeId, EPOLLIN);
    } catch (...) {
      close_fds();
      throw;
    }
    if (options.secret.empty()) {
      COHORT_LOG(warn) << where
                       << " runs without a secret (COHORT_SECRET is empty): any local user can "
                          "connect; cohortrun sets one";
    }
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    stop.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
    if (thread.joinable()) thread.join();
    close_fds();
  }

  void close_fds() {
    for (int* fd : {&listen_fd, &epoll_fd, &wake_fd})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

  void listen() {
    const std::string asked = endpoint(options.host.empty() ? "0.0.0.0" : options.host, options.port);
    COHORT_CHECK_AS(ConfigError, options.port >= 0 && options.port <= 65535)
        << "store server port " << options.port << " is not in 0..65535";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    AddrInfoList list;
    const std::string service = std::to_string(options.port);
    const int rc = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), service.c_str(),
                                 &hints, &list.head);
    COHORT_CHECK_AS(ConfigError, rc == 0)
        << "store server cannot resolve " << asked << ": " << ::gai_strerror(rc);
    int last_errno = 0;
    for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        last_errno = errno;
        continue;
      }
      const int one = 1;
      // Restarting a job must not wait for the previous store's TIME_WAIT
      // connections; Linux still refuses a port another socket listens on.
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
        last_errno = errno;
        ::close(fd);
        continue;
      }
      listen_fd = fd;
      break;
    }
    if (listen_fd < 0) {
      COHORT_THROW(ConfigError) << "store server cannot listen on " << asked << ": "
                                << errno_text(last_errno)
                                << (last_errno == EADDRINUSE
                                        ? " (another store or job holds the port; pick another "
                                          "or stop it)"
                                        : "");
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    COHORT_CHECK(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        << "getsockname: " << errno_text(errno);
    port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    where = "store server on " + endpoint(options.host.empty() ? "0.0.0.0" : options.host, port);
  }

  void watch(int fd, uint64_t id, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    COHORT_CHECK(::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0) << "epoll_ctl: " << errno_text(errno);
  }

  // --- event loop ---------------------------------------------------------

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      COHORT_LOG(error) << where << ": event loop failed, closing every connection: " << e.what();
    }
    for (auto& [id, c] : conns) close_conn(*c);
    conns.clear();
  }

  void loop() {
    epoll_event events[64];
    auto next_sweep = Clock::now() + std::chrono::seconds(1);
    while (!stop.load()) {
      int timeout_ms = 1000;
      if (!deadlines.empty())
        timeout_ms = std::min<int>(timeout_ms, static_cast<int>(detail::remaining(deadlines.begin()->first).count()));
      if (accept_paused)
        timeout_ms = std::min<int>(timeout_ms, static_cast<int>(detail::remaining(accept_resume).count()));
      const int n = ::epoll_wait(epoll_fd, events, 64, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        COHORT_THROW(Error) << "epoll_wait: " << errno_text(errno);
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
          continue;
        }
        if (id == kListenId) {
          try {
            accept_all();
          } catch (const std::exception& e) {
            COHORT_LOG(warn) << where << ": accepting a connection failed: " << e.what();
          }
          continue;
        }
        auto it = conns.find(id);
        if (it == conns.end() || it->second->dead) continue;
        Conn& c = *it->second;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
        if (!c.dead && (events[i].events & EPOLLOUT)) dirty.push_back(c.id);
      }
      const auto now = Clock::now();
      expire_waiters(now);
      if (accept_paused && now >= accept_resume) {
        accept_paused = false;
        watch(listen_fd, kListenId, EPOLLIN);
      }
      if (now >= next_sweep) {
        sweep(now);
        next_sweep = now + std::chrono::seconds(1);
      }
      flush_dirty();
      for (uint64_t id : closed) conns.erase(id);
      closed.clear();
    }
  }

  void accept_all() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int e = errno;
        if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;
        if (e == EAGAIN || e == EWOULDBLOCK) return;
        // Out of descriptors or memory: stop accepting for a moment rather
        // than spin on a listening socket that stays readable.
        COHORT_LOG(warn) << where << ": accept failed (" << errno_text(e) << "); pausing for 100 ms";
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        accept_paused = true;
        accept_resume = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      std::string nonce;
      try {
        nonce = random_bytes(kAuthNonceBytes);
      } catch (...) {
        ::close(fd);
        throw;
      }
      set_socket_options(fd);
      auto c = std::make_unique<Conn>();
      c->id = next_conn++;
      c->fd = fd;
      c->peer = peer_name(ss, len);
      c->nonce = std::move(nonce);
      c->deadline = detail::deadline_after(options.auth_timeout);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = c->id;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        COHORT_LOG(warn) << where << ": epoll_ctl for " << c->peer << ": " << errno_text(errno);
        ::close(fd);
        continue;
      }
      COHORT_LOG(debug) << where << ": connection from " << c->peer;
      c->out = wire::Writer().raw(wire::kHelloMagic).raw(c->nonce).finish();
      dirty.push_back(c->id);
      conns.emplace(c->id, std::move(c));
    }
  }

  void on_readable(Conn& c) {
    char buf[65536];
    // Bounded per event so that one fast client cannot starve the others;
    // level-triggered epoll brings us back for the rest.
    size_t budget = size_t{1} << 20;
    bool eof = false;
    while (budget > 0) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (!c.draining) c.in.append(buf, static_cast<size_t>(n));
        budget -= std::min(budget, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      COHORT_LOG(debug) << where << ": " << c.peer << ": " << errno_text(errno);
      close_conn(c);
      return;
    }
    if (!c.draining) process_frames(c);
    if (eof && !c.dead) {
      COHORT_LOG(debug) << where << ": " << c.peer << " disconnected";
      close_conn(c);
    }
  }

  void process_frames(Conn& c) {
    size_t off = 0;
    while (!c.dead && !c.draining && c.in.size() - off >= 4) {
      const uint32_t len = wire::decode_u32(c.in.data() + off);
      if (!c.authenticated && len > wire::kMaxHandshakeFrameBytes) {
        refuse(c, 0, "sent a " + std::to_string(len) + "-byte frame instead of authenticating");
        break;
      }
      if (len > wire::kMaxFrameBytes) {
        drop(c, "sent a frame of " + std::to_string(len) + " bytes, over the limit of " +
                    std::to_string(wire::kMaxFrameBytes));
        break;
      }
      if (c.in.size() - off - 4 < len) break;
      const std::string_view payload(c.in.data() + off + 4, len);
      off += 4 + size_t{len};
      try {
        handle_frame(c, payload);
      } catch (const wire::ProtocolError& e) {
        if (!c.authenticated)
          refuse(c, 0, std::string("sent a malformed handshake (") + e.what() + ")");
        else
          drop(c, std::string("sent a malformed frame (") + e.what() + ")");
      } catch (const std::exception& e) {
        // Out of memory for one request, say: lose that client, keep serving.
        drop(c, std::string("its request failed: ") + e.what());
      }
    }
    if (c.dead || c.draining)
      c.in.clear();
    else
      c.in.erase(0, off);
  }

  void handle_frame(Conn& c, std::string_view payload) {
    wire::Reader r(payload);
    const uint64_t id = r.u64();
    const auto op = static_cast<Op>(r.u8());
    if (!c.authenticated) {
      if (op != Op::auth) {
        refuse(c, id, "sent a request before authenticating");
        return;
      }
      const std::string mac = r.bytes();
      r.done();
      if (!auth_verify(options.secret, c.nonce, mac)) {
        refuse(c, id, "wrong secret");
        return;
      }
      c.authenticated = true;
      reply(c, id, Status::ok, [](wire::Writer&) {});
      COHORT_LOG(debug) << where << ": " << c.peer << " authenticated";
      return;
    }
    switch (op) {
      case Op::set: {
        std::string key = r.bytes();
        std::string value = r.bytes();
        r.done();
        data[key] = std::move(value);
        reply(c, id, Status::ok, [](wire::Writer&) {});
        notify(key);
        return;
      }
      case Op::get: {
        std::string key = r.bytes();
        const int64_t timeout_ms = r.i64();
        r.done();
        if (auto it = data.find(key); it != data.end()) {
          reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(it->second); });
        } else if (timeout_ms <= 0) {
          reply(c, id, Status::timeout, [](wire::Writer&) {});
        } else {
          park(c, id, Op::get, {std::move(key)}, timeout_ms);
        }
        return;
      }
      case Op::add: {
        std::string key = r.bytes();
        const int64_t delta = r.i64();
        r.done();
        int64_t result;
        try {
          auto it = data.find(key);
          result = detail::add_to_counter(where, key, it == data.end() ? nullptr : &it->second, delta);
        } catch (const Error& e) {
          reply(c, id, Status::error, [&](wire::Writer& w) { w.bytes(e.what()); });
          return;
        }
        data[key] = std::to_string(result);
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.i64(result); });
        notify(key);
        return;
      }
      case Op::compare_set: {
        std::string key = r.bytes();
        std::string expected = r.bytes();
        std::string desired = r.bytes();
        r.done();
        auto it = data.find(key);
        const bool swap = it == data.end() ? expected.empty() : it->second == expected;
        if (!swap) {
          // The current value, or empty for an absent key that stays absent.
          const std::string current = it == data.end() ? std::string() : it->second;
          reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(current); });
          return;
        }
        data[key] = desired;
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(desired); });
        notify(key);
        return;
      }
      case Op::wait: {
        const uint32_t n = r.count(4);
        std::vector<std::string> keys;
        keys.reserve(n);
        for (uint32_t i = 0; i < n; ++i) keys.push_back(r.bytes());
        const int64_t timeout_ms = r.i64();
        r.done();
        std::vector<std::string> missing = missing_keys(keys);
        if (missing.empty()) {
          reply(c, id, Status::ok, [](wire::Writer&) {});
        } else if (timeout_ms <= 0) {
          reply(c, id, Status::timeout, [&](wire::Writer& w) { write_keys(w, missing); });
        } else {
          park(c, id, Op::wait, std::move(keys), timeout_ms);
        }
        return;
      }
      case Op::check: {
        const uint32_t n = r.count(4);
        std::vector<std::string> keys;
        keys.reserve(n);
        for (uint32_t i = 0; i < n; ++i) keys.push_back(r.bytes());
        r.done();
        const bool all = missing_keys(keys).empty();
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.u8(all ? 1 : 0); });
        return;
      }
      case Op::remove: {
        std::string key = r.bytes();
        r.done();
        const bool existed = data.erase(key) > 0;
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.u8(existed ? 1 : 0); });
        return;
      }
      case Op::auth:
        throw wire::ProtocolError("authenticated twice");
    }
    throw wire::ProtocolError("unknown operation " + std::to_string(static_cast<int>(op)));
  }

  static void write_keys(wire::Writer& w, const std::vector<std::string>& keys) {
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.bytes(k);
  }

  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& k : keys)
      if (!data.contains(k)) missing.push_back(k);
    return missing;
  }

  template <typename Fields>
  void reply(Conn& c, uint64_t request, Status status, Fields&& fields) {
    if (c.dead) return;
    wire::Writer w;
    w.u64(request).u8(static_cast<uint8_t>(status));
    fields(w);
    if (c.out.size() - c.out_off > kMaxPendingOutput) {
      drop(c, "does not read its replies");
      return;
    }
    c.out += std::move(w).finish();
    dirty.push_back(c.id);
  }

  // A stranger: one error reply, a warning with its address, a count, and
  // the door.
  void refuse(Conn& c, uint64_t request, const std::string& reason) {
    refused.fetch_add(1);
    COHORT_LOG(warn) << where << ": refused the connection from " << c.peer << ": " << reason
                     << " (a client must prove the job's COHORT_SECRET; it was not served)";
    reply(c, request, Status::error, [](wire::Writer& w) { w.bytes(kRefusedSecret); });
    c.draining = true;
    c.deadline = detail::deadline_after(kDrainTime);
  }

  void drop(Conn& c, const std::string& reason) {
    COHORT_LOG(warn) << where << ": dropping client " << c.peer << ": " << reason;
    close_conn(c);
  }

  void close_conn(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    std::vector<uint64_t> parked;
    parked.swap(c.waiters);
    for (uint64_t w : parked) erase_waiter(w);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
    c.in.clear();
    c.out.clear();
    closed.push_back(c.id);
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      COHORT_LOG(debug) << where << ": sending to " << c.peer << ": " << errno_text(errno);
      close_conn(c);
      return;
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    } else if (c.out_off > (size_t{1} << 20)) {
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
    const bool want_write = !c.out.empty();
    if (want_write != c.want_write) {
      epoll_event ev{};
      ev.events = EPOLLIN | (want_write ? EPOLLOUT : 0u);
      ev.data.u64 = c.id;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
      c.want_write = want_write;
    }
    if (c.draining && c.out.empty() && !c.write_shut) {
      ::shutdown(c.fd, SHUT_WR);
      c.write_shut = true;
    }
  }

  void flush_dirty() {
    // flush() may close connections; closed ones stay in `conns` until reaped.
    std::vector<uint64_t> ids;
    ids.swap(dirty);
    for (uint64_t id : ids) {
      auto it = conns.find(id);
      if (it != conns.end() && !it->second->dead) flush(*it->second);
    }
  }

  void sweep(Clock::time_point now) {
    for (auto& [id, c] : conns) {
      if (c->dead || (c->authenticated && !c->draining) || now < c->deadline) continue;
      if (!c->draining) {
        COHORT_LOG(warn) << where << ": closing the connection from " << c->peer
                         << ": it did not authenticate within "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(options.auth_timeout).count()
                         << " ms";
      }
      close_conn(*c);
    }
  }

  // --- parked requests ----------------------------------------------------

  void park(Conn& c, uint64_t request, Op op, std::vector<std::string> keys, int64_t timeout_ms) {
    const uint64_t wid = next_waiter++;
    Waiter w{c.id, request, op, std::move(keys), detail::deadline_after(Duration(timeout_ms))};
    for (const auto& k : w.keys) waiters_by_key[k].push_back(wid);
    deadlines.emplace(w.deadline, wid);
    c.waiters.push_back(wid);
    waiters.emplace(wid, std::move(w));
  }

  // Forgets a waiter everywhere it is indexed; returns it.
  std::optional<Waiter> erase_waiter(uint64_t wid) {
    auto it = waiters.find(wid);
    if (it == waiters.end()) return std::nullopt;
    Waiter w = std::move(it->second);
    waiters.erase(it);
    for (const auto& k : w.keys) {
      auto kit = waiters_by_key.find(k);
      if (kit == waiters_by_key.end()) continue;
      std::erase(kit->second, wid);
      if (kit->second.empty()) waiters_by_key.erase(kit);
    }
    deadlines.erase({w.deadline, wid});
    if (auto cit = conns.find(w.conn); cit != conns.end()) std::erase(cit->second->waiters, wid);
    return w;
  }

  // `key` changed: answer every parked request whose keys now all exist.
  void notify(const std::string& key) {
    auto it = waiters_by_key.find(key);
    if (it == waiters_by_key.end()) return;
    const std::vector<uint64_t> ids = it->second;  // erase_waiter edits the index
    for (uint64_t wid : ids) {
      auto wit = waiters.find(wid);
      if (wit == waiters.end() || !missing_keys(wit->second.keys).empty()) continue;
      std::optional<Waiter> w = erase_waiter(wid);
      auto cit = conns.find(w->conn);
      if (cit == conns.end() || cit->second->dead) continue;
      if (w->op == Op::get) {
        const Bytes& value = data.at(w->keys.front());
        reply(*cit->second, w->request, Status::ok, [&](wire::Writer& wr) { wr.bytes(value); });
      } else {
        reply(*cit->second, w->request, Status::ok, [](wire::Writer&) {});
      }
    }
  }

  void expire_waiters(Clock::time_point now) {
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      std::optional<Waiter> w = erase_waiter(deadlines.begin()->second);
      if (!w) {
        deadlines.erase(deadlines.begin());  // stale entry; never loop on it
        continue;
      }
      auto cit = conns.find(w->conn);
      if (cit == conns.end() || cit->second->dead) continue;
      if (w->op == Op::get) {
        reply(*cit->second, w->request, Status::timeout, [](wire::Writer&) {});
      } else {
        const std::vector<std::string> missing = missing_keys(w->keys);
        reply(*cit->second, w->request, Status::timeout, [&](wire::Writer& wr) { write_keys(wr, missing); });
      }
    }
  }
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port; }

int TcpStoreServer::refused_count() const { return impl_->refused.load(); }

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

struct TcpStore::Impl {
  TcpStoreOptions options;
  std::string where;  // "store at host:port"
  int fd = -1;
  std::thread reader;

  std::mutex send_mutex;  // one frame at a time on the socket
  std::mutex mutex;       // guards everything below
  std::condition_variable replied;
  std::unordered_map<uint64_t, std::optional<std::string>> pending;  // id -> reply after the id
  uint64_t next_id = 1;
  bool broken = false;
  bool stopping = false;
  std::string broken_reason;

  explicit Impl(TcpStoreOptions o) : options(std::move(o)) {
    where = "store at " + endpoint(options.host, options.port);
    COHORT_CHECK_AS(ConfigError, !options.host.empty()) << "TcpStore needs a host";
    COHORT_CHECK_AS(ConfigError, options.port > 0 && options.port <= 65535)
        << where << ": port " << options.port << " is not in 1..65535";
    connect();
    reader = std::thread([this] { read_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    // Wakes the reader thread out of poll with end-of-stream.
    ::shutdown(fd, SHUT_RDWR);
    if (reader.joinable()) reader.join();
    ::close(fd);
  }

  void connect() {
    Duration timeout = options.connect_timeout;
    if (timeout <= Duration::zero()) {
      const double s = tunables::store_connect_timeout_s();
      COHORT_CHECK_AS(ConfigError, s >= 0 && s < 1e9)
          << "COHORT_STORE_CONNECT_TIMEOUT_S=" << s << " is not a sensible number of seconds";
      timeout = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
    }
    const auto deadline = detail::deadline_after(timeout);
    Duration backoff(20);
    std::string last_error;
    while (true) {
      const int candidate = try_connect(deadline, last_error);
      if (candidate >= 0) {
        if (handshake(candidate, deadline, last_error)) {
          fd = candidate;
          return;
        }
        ::close(candidate);
      }
      if (Clock::now() >= deadline)
        COHORT_THROW(TimeoutError) << "could not reach the " << where << " within " << timeout.count()
                                   << " ms: " << last_error
                                   << " (is cohortrun or rank 0 serving it, and is the address right?)";
      std::this_thread::sleep_for(std::min(backoff, detail::remaining(deadline)));
      backoff = std::min(backoff * 2, Duration(1000));
    }
  }

  // One attempt over every address of the host; a socket or -1 with `error`.
  int try_connect(Clock::time_point deadline, std::string& error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    AddrInfoList list;
    const std::string service = std::to_string(options.port);
    const int rc = ::getaddrinfo(options.host.c_str(), service.c_str(), &hints, &list.head);
    if (rc == EAI_NONAME || rc == EAI_SERVICE || rc == EAI_FAMILY)
      COHORT_THROW(ConfigError) << where << ": cannot resolve '" << options.host << "': " << ::gai_strerror(rc);
    if (rc != 0) {
      error = std::string("resolving '") + options.host + "': " + ::gai_strerror(rc);
      return -1;
    }
    for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        error = "socket: " + errno_text(errno);
        continue;
      }
      int rc2 = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc2 != 0 && errno == EINPROGRESS) {
        // A host that drops SYNs must not eat the whole connect timeout on
        // one address.
        const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
        while (true) {
          pollfd p{fd, POLLOUT, 0};
          const int pr = ::poll(&p, 1, static_cast<int>(detail::remaining(attempt_deadline).count()));
          if (pr < 0 && errno == EINTR) continue;
          if (pr <= 0) {
            errno = ETIMEDOUT;
            rc2 = -1;
            break;
          }
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          errno = err;
          rc2 = err == 0 ? 0 : -1;
          break;
        }
      }
      if (rc2 == 0) {
        set_socket_options(fd);
        return fd;
      }
      error = "connect: " + errno_text(errno);
      ::close(fd);
    }
    return -1;
  }

  // Proves the secret. False (with `error`) for failures worth retrying;
  // ConfigError for a refused secret or a peer that is not a cohort store.
  bool handshake(int fd, Clock::time_point deadline, std::string& error) {
    // A connected server answers at once; a little slack keeps a short
    // remaining connect timeout from failing a healthy handshake.
    const auto hs_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(10));
    const auto hello = read_frame(fd, wire::kMaxHandshakeFrameBytes, hs_deadline, error);
    if (!hello) {
      error = "handshake: " + error;
      return false;
    }
    COHORT_CHECK_AS(ConfigError, hello->size() == wire::kHelloMagic.size() + kAuthNonceBytes &&
                                     hello->starts_with(wire::kHelloMagic))
        << where << " answered but is not a cohort store (expected the " << wire::kHelloMagic
        << " greeting)";
    const std::string nonce = hello->substr(wire::kHelloMagic.size());
    wire::Writer w;
    w.u64(0).u8(static_cast<uint8_t>(Op::auth)).bytes(auth_response(options.secret, nonce));
    if (!write_all(fd, std::move(w).finish(), hs_deadline, error)) {
      error = "handshake: " + error;
      return false;
    }
    const auto answer = read_frame(fd, wire::kMaxHandshakeFrameBytes, hs_deadline, error);
    if (!answer) {
      error = "handshake: " + error;
      return false;
    }
    Status status;
    std::string message;
    try {
      wire::Reader r(*answer);
      r.u64();
      status = static_cast<Status>(r.u8());
      if (status == Status::error) message = r.bytes();
    } catch (const wire::ProtocolError& e) {
      COHORT_THROW(ConfigError) << where << " sent a malformed handshake answer: " << e.what();
    }
    COHORT_CHECK_AS(ConfigError, status != Status::error)
        << where << " refused our secret: COHORT_SECRET differs from the launcher's (server said: "
        << message << ")";
    COHORT_CHECK_AS(ConfigError, status == Status::ok)
        << where << " sent an unexpected handshake status " << static_cast<int>(status);
    return true;
  }

  void read_loop() {
    std::string in;
    char buf[65536];
    while (true) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, -1) < 0) {
        if (errno == EINTR) continue;
        fail("poll: " + errno_text(errno));
        return;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) {
        fail("the store closed the connection (did the launcher or rank 0 exit?)");
        return;
      }
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        fail(errno_text(errno));
        return;
      }
      in.append(buf, static_cast<size_t>(n));
      size_t off = 0;
      while (in.size() - off >= 4) {
        const uint32_t len = wire::decode_u32(in.data() + off);
        if (len > wire::kMaxFrameBytes + 64 || len < 9) {
          fail("malformed reply frame of " + std::to_string(len) + " bytes");
          return;
        }
        if (in.size() - off - 4 < len) break;
        wire::Reader r(std::string_view(in.data() + off + 4, len));
        const uint64_t id = r.u64();
        {
          std::lock_guard lock(mutex);
          // A reply nobody waits for belongs to a call that gave up; drop it.
          if (auto it = pending.find(id); it != pending.end())
            it->second.emplace(in.data() + off + 12, len - 8);
        }
        replied.notify_all();
        off += 4 + size_t{len};
      }
      in.erase(0, off);
    }
  }

  void fail(const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      if (!broken) {
        broken = true;
        broken_reason = reason;
      }
    }
    replied.notify_all();
  }

  [[noreturn]] void throw_lost() {
    std::string reason;
    {
      std::lock_guard lock(mutex);
      reason = broken_reason;
    }
    throw PeerLostError("lost the connection to the " + where + ": " + reason, -1, options.host);
  }

  // Sends one request and waits for its reply until `deadline`; returns the
  // reply's status and fields.
  std::string call(Op op, const char* what, Clock::time_point deadline,
                   const std::function<void(wire::Writer&)>& fields) {
    uint64_t id = 0;
    {
      std::lock_guard lock(mutex);
      if (!broken) {
        id = next_id++;
        pending.emplace(id, std::nullopt);
      }
    }
    if (id == 0) throw_lost();
    wire::Writer w;
    w.u64(id).u8(static_cast<uint8_t>(op));
    fields(w);
    if (w.payload_size() > wire::kMaxFrameBytes) {
      forget(id);
      COHORT_THROW(ConfigError) << where << ": a " << what << " of " << w.payload_size()
                                << " bytes exceeds the store's limit of " << wire::kMaxFrameBytes
                                << " bytes per request";
    }
    const std::string frame = std::move(w).finish();
    std::string error;
    bool sent;
    {
      std::lock_guard lock(send_mutex);
      sent = write_all(fd, frame, deadline, error);
    }
    if (!sent) {
      // A frame cut short leaves the stream unusable: later calls fail too.
      fail("sending a " + std::string(what) + ": " + error);
      forget(id);
      throw_lost();
    }
    std::unique_lock lock(mutex);
    replied.wait_until(lock, deadline, [&] { return pending.at(id).has_value() || broken; });
    auto node = pending.extract(id);
    const bool lost = broken;
    lock.unlock();
    if (node.mapped()) return *std::move(node.mapped());
    if (lost) throw_lost();
    COHORT_THROW(TimeoutError) << where << " did not answer a " << what
                               << " in time (the store server seems stuck)";
    __builtin_unreachable();
  }

  void forget(uint64_t id) {
    std::lock_guard lock(mutex);
    pending.erase(id);
  }

  // Throws Error when the reply is an error; returns a reader past the status.
  std::pair<Status, wire::Reader> status_of(const std::string& reply, const char* what) {
    wire::Reader r(reply);
    const auto status = static_cast<Status>(r.u8());
    if (status == Status::error) COHORT_THROW(Error) << where << ": " << what << " failed: " << r.bytes();
    return {status, r};
  }

  template <typename F>
  auto decode(const char* what, F&& f) {
    try {
      return f();
    } catch (const wire::ProtocolError& e) {
      fail(std::string("malformed reply: ") + e.what());
      throw_lost();
    }
  }

  static int64_t wire_timeout(Duration timeout) {
    return std::max<int64_t>(0, std::min<int64_t>(timeout.count(), int64_t{10} * 365 * 86400 * 1000));
  }
};

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStore::~TcpStore() = default;

namespace {
detail::Clock::time_point call_deadline(const Store& s) { return detail::deadline_after(s.default_timeout()); }
}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  const std::string reply = impl_->call(Op::set, "set", call_deadline(*this),
                                        [&](wire::Writer& w) { w.bytes(key).bytes(value); });
  impl_->decode("set", [&] {
    impl_->status_of(reply, "set");
    return 0;
  });
}

Bytes TcpStore::get(const std::string& key, Duration timeout) {
  const std::string reply =
      impl_->call(Op::get, "get", detail::deadline_after(timeout) + kReplyGrace,
                  [&](wire::Writer& w) { w.bytes(key).i64(Impl::wire_timeout(timeout)); });
  return impl_->decode("get", [&] {
    auto [status, r] = impl_->status_of(reply, "get");
    if (status == Status::timeout) detail::throw_get_timeout(impl_->where, key, timeout);
    return r.bytes();
  });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  const std::string reply = impl_->call(Op::add, "add", call_deadline(*this),
                                        [&](wire::Writer& w) { w.bytes(key).i64(delta); });
  return impl_->decode("add", [&] {
    auto [status, r] = impl_->status_of(reply, "add");
    return r.i64();
  });
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  const std::string reply =
      impl_->call(Op::compare_set, "compare_set", call_deadline(*this),
                  [&](wire::Writer& w) { w.bytes(key).bytes(expected).bytes(desired); });
  return impl_->decode("compare_set", [&] {
    auto [status, r] = impl_->status_of(reply, "compare_set");
    return r.bytes();
  });
}

void TcpStore::wait(std::span<const std::string> keys, Duration timeout) {
  const std::string reply =
      impl_->call(Op::wait, "wait", detail::deadline_after(timeout) + kReplyGrace, [&](wire::Writer& w) {
        w.u32(static_cast<uint32_t>(keys.size()));
        for (const auto& k : keys) w.bytes(k);
        w.i64(Impl::wire_timeout(timeout));
      });
  const auto [timed_out, missing] = impl_->decode("wait", [&] {
    auto [status, r] = impl_->status_of(reply, "wait");
    std::vector<std::string> m;
    if (status == Status::timeout) {
      const uint32_t n = r.count(4);
      for (uint32_t i = 0; i < n; ++i) m.push_back(r.bytes());
    }
    return std::pair(status == Status::timeout, std::move(m));
  });
  if (timed_out) detail::throw_wait_timeout(impl_->where, missing.empty() ? std::vector<std::string>(keys.begin(), keys.end()) : missing, timeout);
}

bool TcpStore::check(std::span<const std::string> keys) {
  const std::string reply = impl_->call(Op::check, "check", call_deadline(*this), [&](wire::Writer& w) {
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.bytes(k);
  });
  return impl_->decode("check", [&] {
    auto [status, r] = impl_->status_of(reply, "check");
    return r.u8() != 0;
  });
}

bool TcpStore::remove(const std::string& key) {
  const std::string reply =
      impl_->call(Op::remove, "remove", call_deadline(*this), [&](wire::Writer& w) { w.bytes(key); });
  return impl_->decode("remove", [&] {
    auto [status, r] = impl_->status_of(reply, "remove");
    return r.u8() != 0;
  });
}

}  // namespace cohort::rendezvous
