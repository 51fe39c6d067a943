#include "cohort/comm/mpi/store_bootstrap.h"

#include <array>
#include <cstring>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::comm::mpi {
namespace {

std::string advertised_host(bool all_local) {
  if (all_local) return "127.0.0.1";
  if (const std::string iface = tunables::iface(); !iface.empty()) {
    const std::string address = net::interface_ipv4(iface);
    COHORT_CHECK_AS(ConfigError, !address.empty()) << "COHORT_IFACE='" << iface << "' has no IPv4 address";
    return address;
  }
  if (const std::string primary = net::primary_interface(); !primary.empty())
    if (std::string address = net::interface_ipv4(primary); !address.empty()) return address;
  return net::host_name();
}

}  // namespace

BootstrappedStore bootstrap_store(comm::Communicator& world, bool all_local) {
  BootstrappedStore store;
  std::array<char, 1024> message{};
  if (world.rank() == 0) {
    store.secret = tunables::secret().empty() ? rendezvous::generate_secret() : tunables::secret();
    // Loopback only when nobody beyond this host needs it.
    auto server = std::make_shared<rendezvous::TcpStoreServer>(rendezvous::TcpStoreServerOptions{
        .host = all_local ? "127.0.0.1" : "0.0.0.0", .port = 0, .secret = store.secret});
    store.port = server->port();
    store.host = advertised_host(all_local);
    store.server = std::move(server);
    const std::string text = store.host + "\n" + std::to_string(store.port) + "\n" + store.secret;
    COHORT_CHECK(text.size() < message.size()) << "store address too long: " << store.host;
    std::memcpy(message.data(), text.data(), text.size());
  }
  world.broadcast(BufferView{message.data(), message.size(), DType::u8}, 0);
  if (world.rank() != 0) {
    std::istringstream is(std::string(message.data()));
    std::getline(is, store.host);
    is >> store.port;
    is.ignore(1);
    std::getline(is, store.secret);
  }
  return store;
}

}  // namespace cohort::comm::mpi
