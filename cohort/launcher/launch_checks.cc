#include "cohort/launcher/launch_checks.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "cohort/launcher/host_list.h"
#include "cohort/launcher/placement.h"
#include "cohort/launcher/spawn.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::launcher {
namespace {

// The value --env gives `key`, or "".
std::string env_flag(const LaunchOptions& options, const std::string& key) {
  std::string value;
  for (const auto& [k, v] : options.env)
    if (k == key) value = v;
  return value;
}

// "lo", or an interface of this machine whose flags say loopback.
bool is_loopback_interface(const std::string& name) {
  if (name == "lo") return true;
  if (name.empty() || name.size() >= IFNAMSIZ) return false;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq request{};
  std::memcpy(request.ifr_name, name.c_str(), name.size());
  const bool loopback = ::ioctl(fd, SIOCGIFFLAGS, &request) == 0 && (request.ifr_flags & IFF_LOOPBACK);
  ::close(fd);
  return loopback;
}

// "host:slots" with a name -H accepts: a word -H takes.
bool looks_like_host_slots(const std::string& word) {
  const size_t colon = word.rfind(':');
  if (colon == std::string::npos || colon + 1 == word.size()) return false;
  for (size_t i = colon + 1; i < word.size(); ++i)
    if (word[i] < '0' || word[i] > '9') return false;
  return host_name_problem(std::string_view(word).substr(0, colon)).empty();
}

}  // namespace

void check_multi_host_launch(const LaunchOptions& options) {
  if (options.hosts.empty()) return;
  const std::vector<RankPlacement> placement = place_ranks(options.hosts, options.num_ranks);
  std::vector<std::string> used;  // the -H hosts that get ranks, in order
  for (const RankPlacement& p : placement)
    if (p.local_rank == 0) used.push_back(p.host + ":" + std::to_string(p.local_size));

  const std::string env_backend = env_flag(options, "COHORT_BACKEND");
  const std::string backend = options.backend.empty() ? env_backend : options.backend;
  if (backend == "shm" && used.size() > 1) {
    std::string list;
    for (const std::string& h : used) list += (list.empty() ? "" : ",") + h;
    throw UsageError(std::string(options.backend.empty() ? "--env COHORT_BACKEND=shm" : "--backend shm") +
                     " cannot join ranks on " + std::to_string(used.size()) + " hosts (" + list +
                     "): shared memory reaches the ranks of one host only; use --backend hierarchical (shared "
                     "memory within each host, gloo across them) or gloo");
  }

  const bool loopback_store = !options.store_addr.empty() && rendezvous::resolves_to_loopback(options.store_addr);
  const bool iface_flag = !options.network_interface.empty();
  const std::string iface = iface_flag ? options.network_interface : env_flag(options, "COHORT_IFACE");
  const bool loopback_iface = is_loopback_interface(iface);
  if (!loopback_store && !loopback_iface) return;
  // The first host of the job that is another machine. A host that is a
  // loopback address runs its ranks on this machine through the launch
  // template (tests do that); any other remote host is another machine, or
  // a namespace or container with a loopback of its own.
  std::string elsewhere;
  for (const RankPlacement& p : placement)
    if (p.remote && p.local_rank == 0 && !rendezvous::resolves_to_loopback(std::string(host_without_user(p.host)))) {
      elsewhere = p.host;
      break;
    }
  if (elsewhere.empty()) return;
  if (loopback_store)
    throw UsageError("--store-addr " + options.store_addr +
                     " is a loopback address, which reaches only this machine: the ranks on " + elsewhere +
                     " could never reach the store there; pass an address of this machine that the hosts can "
                     "reach (its address on their network), or leave --store-addr out to use the source address "
                     "of the route to them");
  throw UsageError((iface_flag ? "--network-interface " : "--env COHORT_IFACE=") + iface +
                   " is a loopback interface, which reaches no other host: the ranks on " + elsewhere +
                   " could not connect to the others through it; name the interface of the hosts' network "
                   "(e.g. eth0), or leave it out to let each rank choose");
}

void check_program_is_not_a_host(const LaunchOptions& options, const std::string& hosts_text) {
  if (options.hosts.empty() || options.command.empty()) return;
  std::vector<std::string> hosts;  // the program's first words that look like hosts
  for (const std::string& word : options.command) {
    if (!looks_like_host_slots(word)) break;
    hosts.push_back(word);
  }
  if (hosts.empty()) return;
  try {
    const char* path = std::getenv("PATH");
    resolve_program(hosts.front(), path ? path : "");
    return;  // a program of that name exists: run it
  } catch (const Error&) {
  }
  std::string fix = hosts_text;
  for (const std::string& h : hosts) fix += "," + h;
  throw UsageError("the program '" + hosts.front() +
                   "' looks like a host:slots, and every word after it (flags such as "
                   "--store-addr or --dry-run included) would be its arguments; " +
                   (hosts_text.empty() ? std::string("put every host in the hostfile")
                                       : "separate the hosts with commas, without spaces: -H " + fix));
}

}  // namespace cohort::launcher
