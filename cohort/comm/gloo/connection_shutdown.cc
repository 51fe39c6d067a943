#include "cohort/comm/gloo/connection_shutdown.h"

#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/rendezvous/auth.h"

namespace cohort::comm::gloo {

TcpEndpoint endpoint_of(const sockaddr_storage& address) {
  TcpEndpoint e;
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    e.family = AF_INET;
    e.port = ntohs(in.sin_port);
    std::memcpy(e.address.data(), &in.sin_addr, 4);
  } else if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    e.family = AF_INET6;
    e.port = ntohs(in6.sin6_port);
    std::memcpy(e.address.data(), &in6.sin6_addr, 16);
  }
  return e;
}

std::string endpoint_text(const TcpEndpoint& e) {
  const size_t bytes = e.family == AF_INET6 ? 16 : 4;
  return (e.family == AF_INET6 ? "6:" : "4:") + std::to_string(e.port) + ":" +
         rendezvous::to_hex({reinterpret_cast<const char*>(e.address.data()), bytes});
}

TcpEndpoint endpoint_from_text(const std::string& text) {
  TcpEndpoint e;
  const size_t a = text.find(':'), b = text.find(':', a + 1);
  const std::string family = text.substr(0, a);
  COHORT_CHECK_AS(ConfigError, b != std::string::npos && (family == "4" || family == "6"))
      << "malformed endpoint '" << text << "'";
  e.family = family == "6" ? AF_INET6 : AF_INET;
  const std::string hex = text.substr(b + 1);
  COHORT_CHECK_AS(ConfigError, hex.size() == (family == "6" ? 32u : 8u) &&
                                   hex.find_first_not_of("0123456789abcdef") == std::string::npos)
      << "malformed endpoint '" << text << "'";
  try {
    const unsigned long port = std::stoul(text.substr(a + 1, b - a - 1));
    COHORT_CHECK_AS(ConfigError, port <= 65535) << "malformed endpoint '" << text << "'";
    e.port = static_cast<uint16_t>(port);
  } catch (const std::logic_error&) {
    COHORT_THROW(ConfigError) << "malformed endpoint '" << text << "'";
  }
  for (size_t i = 0; i < hex.size() / 2; ++i) e.address[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return e;
}

int shutdown_connections(const std::vector<TcpEndpoint>& local, const std::vector<TcpEndpoint>& remote) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return 0;
  auto in = [](const std::vector<TcpEndpoint>& list, const TcpEndpoint& e) {
    return std::find(list.begin(), list.end(), e) != list.end();
  };
  int shut = 0;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    int type = 0;
    socklen_t length = sizeof type;
    if (::getsockopt(int(fd), SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage mine{}, theirs{};
    socklen_t mine_length = sizeof mine, theirs_length = sizeof theirs;
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&mine), &mine_length) != 0) continue;
    if (::getpeername(int(fd), reinterpret_cast<sockaddr*>(&theirs), &theirs_length) != 0) continue;  // not connected
    const TcpEndpoint m = endpoint_of(mine), t = endpoint_of(theirs);
    if (m.family == 0) continue;
    if (in(local, m) || in(remote, t)) shut += ::shutdown(int(fd), SHUT_RDWR) == 0;
  }
  ::closedir(dir);
  return shut;
}

}  // namespace cohort::comm::gloo
