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
#include <thread>
#include <unordered_map>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/server_protocol.h"
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

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
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
  static constexpr uint64_t kFirstConnectionKey = 2;

  // The socket of one connection; its protocol state is in `protocol`.
  struct Socket {
    int fd = -1;
    std::string peer;
    bool want_write = false;  // EPOLLOUT registered
    bool write_shut = false;
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
  std::unique_ptr<ServerProtocol> protocol;
  std::unordered_map<uint64_t, Socket> sockets;  // by the protocol's connection id
  bool listening = false;                         // listen_fd is in the epoll set
  std::optional<Clock::time_point> accept_retry;  // paused after an accept error
  std::optional<Clock::time_point> last_full_notice;

  explicit Impl(TcpStoreServerOptions o) : options(std::move(o)) {
    COHORT_CHECK_AS(ConfigError, options.max_handshakes >= 1)
        << "TcpStoreServerOptions::max_handshakes must be at least 1, got " << options.max_handshakes;
    try {
      listen();
      epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
      COHORT_CHECK(epoll_fd >= 0) << "epoll_create1: " << errno_text(errno);
      wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      COHORT_CHECK(wake_fd >= 0) << "eventfd: " << errno_text(errno);
      set_listening(true);
      watch(wake_fd, kWakeId, EPOLLIN);
    } catch (...) {
      close_fds();
      throw;
    }
    protocol = std::make_unique<ServerProtocol>(ServerProtocolOptions{
        .secret = options.secret, .where = where, .handshake_timeout = options.auth_timeout});
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
      // Without a secret anyone who reaches the store can join the job or
      // feed its ranks false addresses: only this machine's users may.
      COHORT_CHECK_AS(ConfigError, !options.secret.empty() || is_loopback(ai->ai_addr) ||
                                       tunables::allow_insecure_store())
          << "refusing to serve the store on " << asked
          << " without a secret: any host that reaches it could join the job or feed its ranks false "
             "addresses. Set COHORT_SECRET to the same random value for every rank (e.g. `openssl rand "
             "-hex 32`), or serve on a loopback address when every rank runs on this machine, or set "
             "COHORT_ALLOW_INSECURE_STORE=1 on a network you trust (docs/security.md)";
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

  // While not listening, new connections wait in the kernel's backlog.
  void set_listening(bool on) {
    if (on == listening) return;
    if (on)
      watch(listen_fd, kListenId, EPOLLIN);
    else
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
    listening = on;
  }

  // --- event loop ---------------------------------------------------------

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      COHORT_LOG(error) << where << ": event loop failed, closing every connection: " << e.what();
    }
    for (auto& [id, s] : sockets) ::close(s.fd);
    sockets.clear();
  }

  void loop() {
    epoll_event events[64];
    while (!stop.load()) {
      std::optional<Clock::time_point> wake = protocol->next_deadline();
      if (accept_retry) wake = std::min(wake.value_or(*accept_retry), *accept_retry);
      const int timeout_ms = wake ? static_cast<int>(std::min<int64_t>(detail::remaining(*wake).count(), 1000)) : 1000;
      const int n = ::epoll_wait(epoll_fd, events, 64, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        COHORT_THROW(Error) << "epoll_wait: " << errno_text(errno);
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t key = events[i].data.u64;
        if (key == kWakeId) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
          continue;
        }
        if (key == kListenId) {
          try {
            accept_all();
          } catch (const std::exception& e) {
            COHORT_LOG(warn) << where << ": accepting a connection failed: " << e.what();
          }
          continue;
        }
        const uint64_t id = key - kFirstConnectionKey;
        if (!sockets.contains(id)) continue;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(id);
        if ((events[i].events & EPOLLOUT) && sockets.contains(id)) flush(id);
      }
      const auto now = Clock::now();
      protocol->expire(now);
      for (uint64_t id : protocol->take_written()) flush(id);
      for (uint64_t id : protocol->take_ended()) close_socket(id);
      if (accept_retry && now >= *accept_retry) accept_retry.reset();
      // A large job's ranks connecting at once fill the slots too: said
      // quietly, and at most once a minute.
      const bool full = protocol->handshaking() >= options.max_handshakes;
      if (full && (!last_full_notice || now - *last_full_notice >= std::chrono::minutes(1))) {
        COHORT_LOG(info) << where << ": " << protocol->handshaking()
                         << " connections are in the handshake at once; new ones wait until one "
                            "finishes or times out";
        last_full_notice = now;
      }
      set_listening(!accept_retry && !full);
    }
  }

  void accept_all() {
    while (protocol->handshaking() < options.max_handshakes) {
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
        accept_retry = Clock::now() + std::chrono::milliseconds(100);
        set_listening(false);
        return;
      }
      set_socket_options(fd);
      Socket s{.fd = fd, .peer = peer_name(ss, len)};
      uint64_t id;
      try {
        id = protocol->open(s.peer, Clock::now());
      } catch (...) {
        ::close(fd);
        throw;
      }
      // Protocol ids start at 1; shift them past the epoll keys of the
      // listening socket and the wake-up descriptor.
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = id + kFirstConnectionKey;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        COHORT_LOG(warn) << where << ": epoll_ctl for " << s.peer << ": " << errno_text(errno);
        protocol->close(id);
        ::close(fd);
        continue;
      }
      COHORT_LOG(debug) << where << ": connection from " << s.peer;
      sockets.emplace(id, std::move(s));
    }
  }

  void on_readable(uint64_t id) {
    Socket& s = sockets.at(id);
    char buf[65536];
    // Bounded per event so that one fast client cannot starve the others;
    // level-triggered epoll brings us back for the rest.
    size_t budget = size_t{1} << 20;
    while (budget > 0) {
      const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
      if (n > 0) {
        protocol->receive(id, std::string_view(buf, static_cast<size_t>(n)), Clock::now());
        // Counted before the refusal can reach the peer.
        refused.store(protocol->refused());
        if (protocol->phase(id) == ServerProtocol::Phase::ended) return;  // closed after the loop
        budget -= std::min(budget, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        COHORT_LOG(debug) << where << ": " << s.peer << " disconnected";
        close_socket(id);
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      COHORT_LOG(debug) << where << ": " << s.peer << ": " << errno_text(errno);
      close_socket(id);
      return;
    }
  }

  void close_socket(uint64_t id) {
    auto it = sockets.find(id);
    if (it == sockets.end()) return;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    ::close(it->second.fd);
    sockets.erase(it);
    protocol->close(id);
  }

  // Sends what the protocol queued for `id`; then, for a refused stranger,
  // shuts our side down so that it reads the refusal and hangs up.
  void flush(uint64_t id) {
    auto it = sockets.find(id);
    if (it == sockets.end()) return;
    Socket& s = it->second;
    while (true) {
      const std::string_view out = protocol->output(id);
      if (out.empty()) break;
      const ssize_t n = ::send(s.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        protocol->consume(id, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      COHORT_LOG(debug) << where << ": sending to " << s.peer << ": " << errno_text(errno);
      close_socket(id);
      return;
    }
    const bool want_write = !protocol->output(id).empty();
    if (want_write != s.want_write) {
      epoll_event ev{};
      ev.events = EPOLLIN | (want_write ? EPOLLOUT : 0u);
      ev.data.u64 = id + kFirstConnectionKey;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, s.fd, &ev);
      s.want_write = want_write;
    }
    if (!want_write && !s.write_shut && protocol->phase(id) == ServerProtocol::Phase::draining) {
      ::shutdown(s.fd, SHUT_WR);
      s.write_shut = true;
    }
  }
};

bool resolves_to_loopback(const std::string& host) {
  if (is_loopback_host(host)) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  AddrInfoList list;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list.head) != 0 || !list.head) return false;
  for (addrinfo* ai = list.head; ai; ai = ai->ai_next)
    if (!is_loopback(ai->ai_addr)) return false;
  return true;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  sockaddr_in v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    return is_loopback(reinterpret_cast<const sockaddr*>(&v4));
  }
  sockaddr_in6 v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    return is_loopback(reinterpret_cast<const sockaddr*>(&v6));
  }
  return false;
}

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

  std::mutex send_mutex;            // one frame at a time on the socket
  std::optional<FrameMac> to_server;  // under send_mutex after the handshake
  std::optional<FrameMac> from_server;  // the reader thread's after the handshake
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
      std::string final_error;  // why retrying cannot help, when it cannot
      const int candidate = try_connect(deadline, last_error, final_error);
      if (candidate >= 0) {
        bool done = false;
        try {
          done = handshake(candidate, deadline, last_error);
        } catch (...) {
          ::close(candidate);  // a refused or impostor store: no retry, no leak
          throw;
        }
        if (done) {
          fd = candidate;
          return;
        }
        ::close(candidate);
      }
      if (!final_error.empty()) COHORT_THROW(ConfigError) << "cannot reach the " << where << ": " << final_error;
      if (Clock::now() >= deadline)
        COHORT_THROW(TimeoutError) << "could not reach the " << where << " within " << timeout.count()
                                   << " ms: " << last_error
                                   << " (is cohortrun or rank 0 serving it, and is the address right?)";
      std::this_thread::sleep_for(std::min(backoff, detail::remaining(deadline)));
      backoff = std::min(backoff * 2, Duration(1000));
    }
  }

  // Why a failed connect() will fail again however long it is retried, or
  // "" when a retry may succeed (the server may not listen yet, a SYN was
  // lost).
  std::string final_connect_error(int error) const {
    if (error == ENETUNREACH || error == EHOSTUNREACH)
      return errno_text(error) + ": this host has no route to " + options.host +
             " (retrying cannot help: the store's address must be one that every rank's host can reach; "
             "cohortrun --store-addr, COHORT_STORE_ADDR or MASTER_ADDR set it)";
    if (error == ECONNREFUSED && options.server_listening) {
      std::string text = errno_text(error) + ": nothing listens there although the store was started first";
      if (is_loopback_host(options.host) || resolves_to_loopback(options.host))
        text += "; " + options.host +
                " is a loopback address, which reaches only the host it is used on: a rank on another host "
                "cannot reach the launcher's store there (pass cohortrun --store-addr with an address of the "
                "launcher's machine that the hosts can reach)";
      else text += " (has the launcher ended, or is this address another machine's?)";
      return text;
    }
    return {};
  }

  // One attempt over every address of the host; a socket or -1 with `error`,
  // and `final` set when every address failed with an error that retrying
  // cannot fix (final_connect_error()).
  int try_connect(Clock::time_point deadline, std::string& error, std::string& final) {
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
    bool all_final = true;
    for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        error = "socket: " + errno_text(errno);
        all_final = false;
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
      const int failure = errno;
      error = "connect: " + errno_text(failure);
      ::close(fd);
      if (const std::string why = final_connect_error(failure); !why.empty()) final = "connect: " + why;
      else all_final = false;
    }
    if (!all_final) final.clear();
    return -1;
  }

  // The mutual handshake (auth.h). False (with `error`) for failures worth
  // retrying; ConfigError for a refused secret, a server that cannot prove
  // the secret, or a peer that is not a cohort store. On success the frame
  // keys are set.
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
        << where << " answered but is not a cohort store of this version (expected the "
        << wire::kHelloMagic << " greeting)";
    const std::string server_nonce = hello->substr(wire::kHelloMagic.size());
    const std::string client_nonce = random_bytes(kAuthNonceBytes);
    const std::string greeting =
        wire::Writer()
            .raw(wire::kHelloMagic)
            .raw(client_nonce)
            .raw(handshake_proof(Prover::client, options.secret, server_nonce, client_nonce))
            .finish();
    if (!write_all(fd, greeting, hs_deadline, error)) {
      error = "handshake: " + error;
      return false;
    }
    const auto answer = read_frame(fd, wire::kMaxHandshakeFrameBytes, hs_deadline, error);
    if (!answer) {
      error = "handshake: " + error;
      return false;
    }
    Status status;
    std::string message, server_proof;
    try {
      wire::Reader r(*answer);
      status = static_cast<Status>(r.u8());
      if (status == Status::error) message = r.bytes();
      if (status == Status::ok) server_proof = r.raw(kAuthMacBytes);
      r.done();
    } catch (const wire::ProtocolError& e) {
      COHORT_THROW(ConfigError) << where << " sent a malformed handshake answer: " << e.what();
    }
    COHORT_CHECK_AS(ConfigError, status != Status::error)
        << where << " refused our secret: COHORT_SECRET differs from the launcher's (server said: "
        << message << ")";
    COHORT_CHECK_AS(ConfigError, status == Status::ok)
        << where << " sent an unexpected handshake status " << static_cast<int>(status);
    COHORT_CHECK_AS(ConfigError, verify_handshake_proof(Prover::server, options.secret, server_nonce,
                                                        client_nonce, server_proof))
        << where << " could not prove that it knows the job secret: it is not this job's store (an "
        << "impostor, or another job's store on the same address); refusing to use it";
    const SessionKeys keys = session_keys(options.secret, server_nonce, client_nonce);
    to_server.emplace(keys.client_to_server);
    from_server.emplace(keys.server_to_client);
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
        if (len > wire::kMaxFrameBytes + 64 + kAuthMacBytes || len < 9 + kAuthMacBytes) {
          fail("malformed reply frame of " + std::to_string(len) + " bytes");
          return;
        }
        if (in.size() - off - 4 < len) break;
        const auto payload = wire::open_sealed(*from_server, std::string_view(in.data() + off + 4, len));
        if (!payload) {
          fail("reply " + std::to_string(from_server->frames()) +
               " fails its integrity check: something between this rank and the store altered, "
               "replayed or injected it");
          return;
        }
        wire::Reader r(*payload);
        const uint64_t id = r.u64();
        {
          std::lock_guard lock(mutex);
          // A reply nobody waits for belongs to a call that gave up; drop it.
          if (auto it = pending.find(id); it != pending.end()) it->second.emplace(payload->substr(8));
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
    std::string error;
    bool sent;
    {
      // Sealed under the lock: the sequence numbers follow the order on the wire.
      std::lock_guard lock(send_mutex);
      sent = write_all(fd, w.finish_sealed(*to_server), deadline, error);
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
