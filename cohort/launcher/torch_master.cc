#include "cohort/launcher/torch_master.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/seconds.h"

namespace cohort::launcher {
namespace {

// A TCP port that no socket of this host holds now: bound on every address
// to port 0 (the kernel picks one of its ephemeral ports), then released.
int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  COHORT_CHECK_AS(ConfigError, fd >= 0) << "cannot open a socket to find a port for MASTER_PORT: "
                                        << std::strerror(errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  COHORT_CHECK_AS(ConfigError, ok) << "cannot find a free port for MASTER_PORT: " << std::strerror(error);
  return ntohs(address.sin_port);
}

constexpr std::pair<TorchMasterRole, const char*> kRoleNames[] = {
    {TorchMasterRole::given, "given"}, {TorchMasterRole::publish, "publish"}, {TorchMasterRole::read, "read"}};

}  // namespace

const char* torch_master_role_name(TorchMasterRole role) {
  for (const auto& [r, name] : kRoleNames)
    if (r == role) return name;
  return "given";
}

std::optional<TorchMasterRole> torch_master_role(std::string_view name) {
  for (const auto& [r, n] : kRoleNames)
    if (name == n) return r;
  return std::nullopt;
}

bool user_sets_torch_master(const std::vector<std::pair<std::string, std::string>>& extra) {
  return std::any_of(extra.begin(), extra.end(),
                     [](const auto& kv) { return kv.first == "MASTER_ADDR" || kv.first == "MASTER_PORT"; });
}

std::string choose_torch_master(const std::string& iface, bool all_local, const std::string& store_host) {
  // COHORT_IFACE's address; without one (or when that interface has no IPv4
  // address, which the communicator reports itself) the choice made without
  // it. The master is never a reason for a launch to fail.
  std::string address = iface.empty() ? std::string() : net::interface_ipv4(iface);
  if (address.empty()) {
    const net::ListenChoice listen = net::listen_choice("", all_local, store_host);
    address = listen.iface.empty()   ? listen.address
              : listen.iface == "lo" ? std::string("127.0.0.1")
                                     : net::interface_ipv4(listen.iface);
  }
  if (address.empty()) address = net::host_name();
  return address + ":" + std::to_string(free_tcp_port());
}

std::string await_torch_master(rendezvous::Store& store, double timeout_s, const std::function<bool()>& rank0_running) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + steady_seconds(timeout_s);
  // Without a way to see rank 0 end, one wait; with one, polls short enough
  // that a failed start is noticed at once.
  const auto poll = rank0_running ? rendezvous::Duration(100) : rendezvous::Duration::max();
  for (;;) {
    const auto left = std::chrono::duration_cast<rendezvous::Duration>(deadline - Clock::now());
    if (left <= rendezvous::Duration::zero()) break;
    try {
      return store.get(kTorchMasterKey, std::min(left, poll));
    } catch (const TimeoutError&) {
      if (rank0_running && !rank0_running())
        COHORT_THROW(Error) << "rank 0 ended before it chose torch.distributed's MASTER_ADDR/MASTER_PORT";
    }
  }
  COHORT_THROW(TimeoutError) << "rank 0 did not choose torch.distributed's MASTER_ADDR/MASTER_PORT within "
                             << seconds_text(timeout_s) << " (--start-timeout)";
}

void set_torch_master(EnvironmentMap& env, const std::string& master) {
  const size_t colon = master.rfind(':');
  COHORT_CHECK_AS(ConfigError, colon != std::string::npos && colon > 0)
      << "torch.distributed's master '" << master << "' is not addr:port";
  env["MASTER_ADDR"] = master.substr(0, colon);
  env["MASTER_PORT"] = master.substr(colon + 1);
}

}  // namespace cohort::launcher
