#include "tools/probe/host_facts.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cohort/comm/create.h"
#include "cohort/common/build_id.h"
#include "cohort/common/json.h"
#include "cohort/common/network_interface.h"

namespace cohort::probe {
namespace {

std::string quoted(const std::string& s) { return "\"" + json::escape(s) + "\""; }

// A limit's soft value, -1 for unlimited.
long long soft_limit(int resource) {
  rlimit l{};
  if (::getrlimit(resource, &l) != 0) return -2;
  return l.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long long>(l.rlim_cur);
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::string interface_of(const std::string& address) {
  if (address.empty()) return "";
  for (const std::string& name : net::interfaces_with_ipv4())
    if (net::interface_ipv4(name) == address) return name;
  return "";
}

std::string host_facts_json(const rendezvous::LaunchInfo& info, int listen_port, size_t shm_need) {
  std::ostringstream out;
  const char* host = std::getenv("COHORT_HOST");
  const char* iface = std::getenv("COHORT_IFACE");
  out << "{\"rank\": " << info.rank << ", \"local_rank\": " << info.local_rank
      << ", \"local_size\": " << info.local_size << ", \"host\": " << quoted(host && *host ? host : net::host_name())
      << ", \"hostname\": " << quoted(net::host_name())
      << ", \"boot_id\": " << quoted(first_line("/proc/sys/kernel/random/boot_id"))
      << ", \"build_id\": " << quoted(build_id()) << ", \"build\": " << quoted(build_description())
      << ", \"libtorch\": " << quoted(libtorch_version()) << ", \"backends\": [";
  const auto backends = comm::available_backends();
  for (size_t i = 0; i < backends.size(); ++i) out << (i ? ", " : "") << quoted(backends[i]);
  out << "], \"interfaces\": [";
  const auto names = net::interfaces_with_ipv4();
  for (size_t i = 0; i < names.size(); ++i)
    out << (i ? ", " : "") << "{\"name\": " << quoted(names[i])
        << ", \"address\": " << quoted(net::interface_ipv4(names[i])) << "}";
  out << "], \"store_iface\": " << quoted(interface_of(net::local_address_toward(info.store_host)))
      << ", \"iface_env\": " << quoted(iface ? iface : "") << ", \"listen_port\": " << listen_port;

  struct statvfs shm {};
  const bool has_shm = ::statvfs("/dev/shm", &shm) == 0;
  out << ", \"shm_total\": " << (has_shm ? (long long)(shm.f_blocks * shm.f_frsize) : 0LL)
      << ", \"shm_free\": " << (has_shm ? (long long)(shm.f_bavail * shm.f_frsize) : 0LL)
      << ", \"shm_need\": " << shm_need;
  out << ", \"nofile\": " << soft_limit(RLIMIT_NOFILE) << ", \"memlock\": " << soft_limit(RLIMIT_MEMLOCK)
      << ", \"address_space\": " << soft_limit(RLIMIT_AS);
  std::istringstream range(first_line("/proc/sys/net/ipv4/ip_local_port_range"));
  int low = 32768, high = 60999;
  range >> low >> high;
  out << ", \"port_range\": [" << low << ", " << high << "]";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  out << ", \"cores\": " << cores << ", \"clock_s\": " << std::fixed << double(now.tv_sec) + now.tv_nsec * 1e-9 << "}";
  return out.str();
}

}  // namespace cohort::probe
