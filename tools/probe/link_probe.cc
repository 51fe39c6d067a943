#include "tools/probe/link_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/error.h"

namespace cohort::probe {
namespace {

int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Whole reads and writes on a blocking socket; false when the peer is gone.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One client connection until it closes.
void serve_connection(int fd) {
  set_nodelay(fd);
  std::vector<char> sink(1 << 20);
  for (char op; read_all(fd, &op, 1);) {
    if (op == 'p') {
      const int64_t t = realtime_ns();
      if (!write_all(fd, &t, sizeof t)) break;
    } else if (op == 'b') {
      uint64_t left = 0;
      if (!read_all(fd, &left, sizeof left)) break;
      while (left > 0) {
        const ssize_t r = ::recv(fd, sink.data(), std::min<uint64_t>(left, sink.size()), 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        left -= uint64_t(r);
      }
      const char ack = 'k';
      if (left > 0 || !write_all(fd, &ack, 1)) break;
    } else {
      break;
    }
  }
  ::close(fd);
}

}  // namespace

LinkListener::LinkListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  COHORT_CHECK(fd_ >= 0) << "cannot open a socket: " << std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  COHORT_CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd_, 64) == 0 &&
               ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      << "cannot listen on a TCP port: " << std::strerror(errno);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

LinkListener::~LinkListener() {
  stop_ = true;
  thread_.join();
  // Connections end when their clients close (the probes close theirs
  // before they exit; the listener lives until the probe's end).
  for (std::thread& t : connections_) t.detach();
  ::close(fd_);
}

void LinkListener::serve() {
  while (!stop_) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) connections_.emplace_back(serve_connection, c);
  }
}

int connect_within(const std::string& address, int port, double timeout_s, std::string& error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    error = "not an IPv4 address";
    return -1;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    rc = ::poll(&p, 1, int(timeout_s * 1000));
    if (rc == 0) {
      ::close(fd);
      char text[64];
      std::snprintf(text, sizeof text, "no answer within %.1f s", timeout_s);
      error = text;
      return -1;
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    rc = so_error == 0 ? 0 : -1;
    errno = so_error;
  }
  if (rc != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_nodelay(fd);
  return fd;
}

LinkMeasure measure_link(int fd, int pings, int transfers, size_t bytes) {
  LinkMeasure m;
  double best_rtt = 1e30;
  for (int i = 0; i < pings; ++i) {
    const int64_t sent = realtime_ns();
    const double t0 = now_s();
    int64_t peer = 0;
    const char op = 'p';
    COHORT_CHECK(write_all(fd, &op, 1) && read_all(fd, &peer, sizeof peer)) << "the peer closed the link probe";
    const double rtt = now_s() - t0;
    if (rtt < best_rtt) {
      best_rtt = rtt;
      const int64_t back = realtime_ns();
      m.offset_s = double(peer - (sent + back) / 2) * 1e-9;
    }
  }
  m.latency_s = best_rtt / 2;
  std::vector<char> data(bytes, 'x');
  for (int i = 0; i < transfers; ++i) {
    const double t0 = now_s();
    const char op = 'b';
    const uint64_t n = bytes;
    char ack = 0;
    COHORT_CHECK(write_all(fd, &op, 1) && write_all(fd, &n, sizeof n) && write_all(fd, data.data(), bytes) &&
                 read_all(fd, &ack, 1))
        << "the peer closed the link probe";
    // The ack's way back is one latency, not transfer time.
    const double seconds = std::max(1e-9, now_s() - t0 - m.latency_s);
    m.bytes_per_s = std::max(m.bytes_per_s, double(bytes) / seconds);
  }
  return m;
}

}  // namespace cohort::probe
