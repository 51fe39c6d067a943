#include "tools/probe/host_facts.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/build_id.h"
#include "cohort/common/host_key.h"
#include "cohort/common/json.h"
#include "cohort/common/json_object.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/tunables.h"

namespace cohort::probe {
namespace {

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
  // The interface the launch's gloo would listen on here: the very choice
  // comm/create.cc makes for the job's ranks (init_world's inputs).
  const net::ListenChoice listen = net::listen_choice(tunables::iface(), info.local_size == info.size, info.store_host);
  std::vector<std::string> backends, interfaces;
  for (const std::string& b : comm::available_backends()) backends.push_back("\"" + json::escape(b) + "\"");
  for (const std::string& name : net::interfaces_with_ipv4())
    interfaces.push_back(JsonObject().add("name", name).add("address", net::interface_ipv4(name)).str());
  struct statvfs shm {};
  const bool has_shm = ::statvfs("/dev/shm", &shm) == 0;
  std::istringstream range(first_line("/proc/sys/net/ipv4/ip_local_port_range"));
  int low = 32768, high = 60999;
  range >> low >> high;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return JsonObject()
      .add("rank", info.rank)
      .add("local_rank", info.local_rank)
      .add("local_size", info.local_size)
      .add("host", net::host_label())
      .add("hostname", net::host_name())
      .add("boot_id", first_line("/proc/sys/kernel/random/boot_id"))
      .add("build_id", build_id())
      .add("build", build_description())
      .add("libtorch", libtorch_version())
      .add_raw("backends", json_array(backends))
      .add_raw("interfaces", json_array(interfaces))
      // Its name also where the choice is an address (the route to the store).
      .add("launch_iface", listen.iface.empty() ? interface_of(listen.address) : listen.iface)
      // cohortrun sets COHORT_IFACE from --network-interface.
      .add("launch_iface_why", listen.why == "COHORT_IFACE" ? "--network-interface" : listen.why)
      .add("listen_port", listen_port)
      .add("shm_total", int64_t(has_shm ? shm.f_blocks * shm.f_frsize : 0))
      .add("shm_free", int64_t(has_shm ? shm.f_bavail * shm.f_frsize : 0))
      .add("shm_need", int64_t(shm_need))
      .add("nofile", int64_t(soft_limit(RLIMIT_NOFILE)))
      .add("memlock", int64_t(soft_limit(RLIMIT_MEMLOCK)))
      .add("address_space", int64_t(soft_limit(RLIMIT_AS)))
      .add_raw("port_range", json_array({std::to_string(low), std::to_string(high)}))
      .add("cores", cores)
      .add("clock_s", double(now.tv_sec) + now.tv_nsec * 1e-9, 17)
      .str();
}

}  // namespace cohort::probe
