// This host's name, interfaces and addresses: where a communicator listens,
// what a store address or a parameter server advertises, how ranks tell
// hosts apart.
//
// Pure POSIX, in common because every layer that meets the network uses it
// (rendezvous's registration, comm's create and its gloo, mpi, shm and
// hierarchical backends, the parameter servers, the launcher). Internal:
// not installed.
#pragma once

#include <string>
#include <vector>

namespace cohort::net {

// The interface of the IPv4 default route (from /proc/net/route), or ""
// when there is none (an isolated host or network namespace).
std::string default_route_interface();

// The interface a host reaches the others through when nothing says:
// the default route's, else the first interface that is up, not loopback,
// and has an IPv4 address (a network namespace joined by one link often has
// no default route), else "".
std::string primary_interface();

// The names of the interfaces that are up and have an IPv4 address.
std::vector<std::string> interfaces_with_ipv4();

// The first IPv4 address of `iface` in dotted form, or "" when it has none
// or does not exist.
std::string interface_ipv4(const std::string& iface);

// The local IPv4 address the kernel would use to reach `host` (a UDP
// socket's connect(2) picks the route and sends nothing), or "" when `host`
// does not resolve or has no route.
std::string local_address_toward(const std::string& host);

// This host's name (gethostname), or "" when it cannot be read.
std::string host_name();

// Where a communicator's TCP transport (gloo, and the hierarchical
// backend's cross-host part) listens on this host: an interface or, when
// `iface` is empty, an address (or name) of this host to bind.
struct ListenChoice {
  std::string iface;
  std::string address;
  // Why, for messages: "COHORT_IFACE", "every rank on this host", "the route
  // to the store", "the primary interface" or "the host name".
  std::string why;
};

// The one choice every user of it shares (comm/create.cc and gloo's
// communicator for a launch, cohort-probe for `cohortrun --check`):
// `iface` (COHORT_IFACE) when given; else loopback when every rank of the
// communicator is on this host (`all_local`); else the local address of the
// route to `store_host` (every rank reaches the store); else
// primary_interface(); else host_name().
ListenChoice listen_choice(const std::string& iface, bool all_local, const std::string& store_host);

}  // namespace cohort::net
