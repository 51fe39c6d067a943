#include "cohort/common/network_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

namespace cohort::net {
namespace {

std::string dotted(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return text;
}

}  // namespace

std::string default_route_interface() {
  // Columns: Iface Destination Gateway Flags ...; the default route has
  // destination 00000000 and the RTF_UP flag (1).
  std::ifstream routes("/proc/net/route");
  std::string line;
  std::getline(routes, line);  // header
  while (std::getline(routes, line)) {
    std::istringstream is(line);
    std::string iface, destination, gateway;
    unsigned flags = 0;
    if (!(is >> iface >> destination >> gateway >> std::hex >> flags)) continue;
    if (destination == "00000000" && (flags & 1u)) return iface;
  }
  return {};
}

std::string primary_interface() {
  if (std::string route = default_route_interface(); !route.empty()) return route;
  std::string found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i && found.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
      found = i->ifa_name;
  freeifaddrs(list);
  return found;
}

std::vector<std::string> interfaces_with_ipv4() {
  std::vector<std::string> names;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return names;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
        std::find(names.begin(), names.end(), i->ifa_name) == names.end())
      names.emplace_back(i->ifa_name);
  freeifaddrs(list);
  return names;
}

std::string interface_ipv4(const std::string& iface) {
  std::string address;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return address;
  for (ifaddrs* i = list; i && address.empty(); i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && iface == i->ifa_name)
      address = dotted(*reinterpret_cast<const sockaddr_in*>(i->ifa_addr));
  freeifaddrs(list);
  return address;
}

std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || !found) return {};
  std::string address;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
      address = dotted(local);
    close(fd);
  }
  freeaddrinfo(found);
  return address;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

ListenChoice listen_choice(const std::string& iface, bool all_local, const std::string& store_host) {
  if (!iface.empty()) return {.iface = iface, .why = "COHORT_IFACE"};
  if (all_local) return {.iface = "lo", .why = "every rank on this host"};
  if (!store_host.empty())
    if (std::string address = local_address_toward(store_host); !address.empty())
      return {.address = std::move(address), .why = "the route to the store"};
  if (std::string primary = primary_interface(); !primary.empty())
    return {.iface = std::move(primary), .why = "the primary interface"};
  return {.address = host_name(), .why = "the host name"};
}

}  // namespace cohort::net
