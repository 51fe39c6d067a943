// Waking a gloo communicator's waits from outside: Gloo wakes a rank waiting
// on a pair only when that pair's socket reports an error or end of stream,
// or when the wait times out. A peer behind a cut link produces neither, and
// the Gloo call that could raise one for its pairs (tcp::Pair::
// signalExceptionExternal) sits in a header Debian's libgloo-dev cannot
// compile (it includes gloo/common/memory.h, which the package lacks). So
// the communicator shuts its own TCP connections down (shutdown(2), not
// close: Gloo still owns the descriptors): each pair's socket then reads end
// of stream, Gloo's event loop fails the pair, and every wait on it raises.
//
// A pair's connection is known by its endpoints: the accepting side's local
// address is its pair's listening address (TcpEndpoint of Pair::address()),
// the connecting side's remote address is the peer pair's one. Where Gloo
// listens once per device (the address then differs per pair only by a
// sequence number, which is not in the socket), this matches every
// connection of the device: the communicator's and those of its split()s,
// which share it and belong to the same world. A descriptor closed and
// reused by another thread between the scan and the shutdown could be hit
// only if its endpoints matched too.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::comm::gloo {

struct TcpEndpoint {
  int family = 0;  // AF_INET or AF_INET6
  uint16_t port = 0;
  std::array<uint8_t, 16> address{};  // the first 4 bytes for AF_INET
  bool operator==(const TcpEndpoint&) const = default;
};

// The endpoint of an IPv4 or IPv6 socket address (family 0 for others).
TcpEndpoint endpoint_of(const sockaddr_storage& address);
// A text form that endpoint_from_text() reads back ("4:port:hex" or
// "6:port:hex"); ConfigError on a malformed text.
std::string endpoint_text(const TcpEndpoint& e);
TcpEndpoint endpoint_from_text(const std::string& text);

// Shuts down (both directions) every TCP socket of this process whose local
// endpoint is in `local` or whose remote endpoint is in `remote`. Returns
// how many.
int shutdown_connections(const std::vector<TcpEndpoint>& local, const std::vector<TcpEndpoint>& remote);

}  // namespace cohort::comm::gloo
