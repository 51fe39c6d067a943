#include "python/src/group_world.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/host_key.h"
#include "cohort/common/network_interface.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::python {
namespace {

// c10d's store speaks bytes as vector<uint8_t>; the bootstrap values are text.
void post(::c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string fetch(::c10d::Store& store, const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store.wait({key}, timeout);
  } catch (const c10::Error& e) {
    COHORT_THROW(TimeoutError) << "torch.distributed backend \"cohort\": waited " << timeout.count() << " ms for '"
                               << key << "' in torch's store (a rank of the group did not start, "
                               << "or passed another store): " << e.what_without_backtrace();
  }
  std::vector<uint8_t> bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

// The host of the TCPStore under torch's store (its PrefixStores unwrapped),
// or "" for another kind (file://).
std::string torch_store_host(::c10d::Store& store) {
  ::c10d::Store* s = &store;
  while (auto* prefix = dynamic_cast<::c10d::PrefixStore*>(s)) s = prefix->getUnderlyingStore().get();
  auto* tcp = dynamic_cast<::c10d::TCPStore*>(s);
  return tcp ? tcp->getHost() : std::string();
}

// The address by which the group's other hosts reach this one: that of
// `iface` (COHORT_IFACE) when set; else the one this host uses toward
// torch's store (which every rank reached); else the primary interface's;
// else the host name.
std::string reachable_address(::c10d::Store& bootstrap, const std::string& iface) {
  if (!iface.empty()) {
    std::string address = net::interface_ipv4(iface);
    COHORT_CHECK_AS(ConfigError, !address.empty()) << "COHORT_IFACE=" << iface << " has no IPv4 address on this host";
    return address;
  }
  std::string address;
  if (const std::string host = torch_store_host(bootstrap); !host.empty() && !rendezvous::is_loopback_host(host))
    address = net::local_address_toward(host);
  if (address.empty()) address = net::interface_ipv4(net::primary_interface());
  return address.empty() ? net::host_name() : address;
}

}  // namespace

GroupWorld::GroupWorld(::c10d::Store& bootstrap, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size) {
  COHORT_CHECK_AS(ConfigError, size >= 1 && rank >= 0 && rank < size)
      << "torch.distributed backend \"cohort\": rank " << rank << " of a group of " << size;
  // 1. Where the ranks run.
  post(bootstrap, "cohort/host/" + std::to_string(rank), net::host_key());
  bool all_local = true;
  for (int r = 0; r < size; ++r)
    all_local = all_local && fetch(bootstrap, "cohort/host/" + std::to_string(r), timeout) == net::host_key();

  comm::CommunicatorOptions options = comm::options_from_env();

  // 2. Rank 0 serves cohort's store for the group.
  std::string address, secret, job_id;
  if (rank == 0) {
    secret = rendezvous::generate_secret();
    job_id = "torch-" + rendezvous::generate_secret().substr(0, 16);
    auto server = std::make_shared<rendezvous::TcpStoreServer>(
        rendezvous::TcpStoreServerOptions{.host = all_local ? "127.0.0.1" : "0.0.0.0", .port = 0, .secret = secret});
    const std::string host = all_local ? "127.0.0.1" : reachable_address(bootstrap, options.iface);
    address = host + ":" + std::to_string(server->port());
    server_ = server;
    post(bootstrap, "cohort/secret", secret);
    post(bootstrap, "cohort/job", job_id);
    post(bootstrap, "cohort/store", address);
  } else {
    secret = fetch(bootstrap, "cohort/secret", timeout);
    job_id = fetch(bootstrap, "cohort/job", timeout);
    address = fetch(bootstrap, "cohort/store", timeout);
  }
  const size_t colon = address.rfind(':');
  store_ = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
      .host = address.substr(0, colon), .port = std::stoi(address.substr(colon + 1)), .secret = secret});

  // 3. The communicator and the engine.
  options.all_local = all_local;
  options.job_id = job_id;
  options.timeout = timeout;
  if (!all_local) options.store_host = address.substr(0, colon);
  backend_ = comm::resolve_backend(options);
  std::shared_ptr<comm::Communicator> comm =
      comm::create_communicator(std::make_shared<rendezvous::PrefixStore>("comm/", store_), rank, size, options);
  engine::EngineOptions engine_options;
  engine_options.label = "torch.distributed";
  // A rank that dies before submitting an op is noticed within this, not
  // the default 5 s: torch.distributed users get the dead rank's name in
  // well under a second (one negotiation per period, only while ops wait).
  engine_options.liveness_probe = std::chrono::milliseconds(100);
  engine_ = std::make_unique<engine::Engine>(
      std::move(comm), std::make_shared<rendezvous::PrefixStore>("engine/", store_), engine_options);
}

}  // namespace cohort::python
