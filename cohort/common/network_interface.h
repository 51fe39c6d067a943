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

}  // namespace cohort::net
