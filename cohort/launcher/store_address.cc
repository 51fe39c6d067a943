#include "cohort/launcher/store_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "cohort/common/error.h"
#include "cohort/launcher/host_list.h"

namespace cohort::launcher {
namespace {

constexpr const char* kAdvice = "; pass --store-addr ADDR, an address of this machine the hosts can reach";

}  // namespace

std::string local_address_towards(const std::string& host) {
  const std::string name(host_without_user(host));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), "9", &hints, &list); rc != 0)
    throw ConfigError("cannot tell which address of this machine host '" + host + "' reaches: '" + name +
                      "' does not resolve (" + ::gai_strerror(rc) + ")" + kAdvice);
  std::string error = "no address";
  std::string result;
  for (addrinfo* ai = list; ai && result.empty(); ai = ai->ai_next) {
    // A UDP connect() sends nothing: it only asks the routing table.
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, raw, text, sizeof text)) result = text;
    } else {
      error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  if (result.empty())
    throw ConfigError("cannot tell which address of this machine host '" + host + "' reaches: " + error + kAdvice);
  return result;
}

StoreAddress choose_store_address(const std::vector<RankPlacement>& placement, const std::string& flag) {
  if (!flag.empty()) return {flag, flag, "--store-addr"};
  std::map<std::string, std::string> by_address;  // address -> first host reached from it
  for (const RankPlacement& p : placement)
    if (p.remote) by_address.emplace(local_address_towards(p.host), p.host);
  if (by_address.empty()) return {"127.0.0.1", "127.0.0.1", "every rank runs on this machine"};
  if (by_address.size() > 1) {
    auto second = std::next(by_address.begin());
    throw ConfigError("hosts are reached from different addresses of this machine (" + by_address.begin()->second +
                      " from " + by_address.begin()->first + ", " + second->second + " from " + second->first + ")" +
                      kAdvice);
  }
  const std::string& address = by_address.begin()->first;
  return {address, address, "this machine's address on the route to " + by_address.begin()->second};
}

}  // namespace cohort::launcher
