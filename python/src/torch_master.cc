#include "python/src/torch_master.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/network_interface.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::python {
namespace {

// A TCP port free on every interface of this host right now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  COHORT_CHECK_AS(ConfigError, fd >= 0) << "cannot open a socket to find a free port: " << std::strerror(errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  COHORT_CHECK_AS(ConfigError, ok) << "cannot find a free port for torch.distributed's store: " << std::strerror(error);
  return ntohs(address.sin_port);
}

}  // namespace

std::optional<TorchMaster> torch_master_under_cohortrun() {
  if (rendezvous::launched_by() != rendezvous::LaunchSource::cohortrun) return std::nullopt;
  const rendezvous::LaunchInfo info = rendezvous::discover();
  if (info.elastic_slot >= 0) return std::nullopt;
  const bool all_local = info.local_size == info.size;
  if (info.size == 1) return TorchMaster{"127.0.0.1", free_port()};
  rendezvous::TcpStore store({.host = info.store_host, .port = info.store_port, .secret = info.secret});
  const std::string key = "torch/master";
  if (info.rank == 0) {
    std::string addr = all_local ? "127.0.0.1" : net::local_address_toward(info.store_host);
    if (addr.empty()) addr = net::host_name();
    const TorchMaster master{addr, free_port()};
    store.set(key, master.addr + ":" + std::to_string(master.port));
    return master;
  }
  const std::string value = store.get(key);
  const size_t colon = value.rfind(':');
  return TorchMaster{value.substr(0, colon), std::stoi(value.substr(colon + 1))};
}

}  // namespace cohort::python
