// The probe's own TCP link test between hosts: a listener on an ephemeral
// port of every interface (where gloo's data plane listens too, so a
// firewall that drops its ports drops this one), reachability of each of a
// peer's addresses, and over one connection the round trip, the clock
// offset (as NTP reckons it: the peer's clock read in the middle of the
// shortest round trip) and the one-way bandwidth.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace cohort::probe {

// Serves connections until destroyed: 'p' answers the peer's clock
// (CLOCK_REALTIME, 8 bytes of nanoseconds), 'b' reads an 8-byte length and
// that many bytes, then answers one byte.
class LinkListener {
 public:
  LinkListener();  // binds 0.0.0.0:0; Error when it cannot
  ~LinkListener();
  LinkListener(const LinkListener&) = delete;
  LinkListener& operator=(const LinkListener&) = delete;
  int port() const { return port_; }

 private:
  void serve();
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> connections_;
};

// Connects to address:port within timeout_s. Returns the socket, or -1 with
// `error` set ("connection refused", "timed out after 1.5 s", ...).
int connect_within(const std::string& address, int port, double timeout_s, std::string& error);

struct LinkMeasure {
  double latency_s = 0;    // half the shortest round trip
  double offset_s = 0;     // the peer's clock minus ours
  double bytes_per_s = 0;  // best of the transfers, one way
};

// Over a connected socket to a LinkListener: `pings` round trips, then
// `transfers` one-way transfers of `bytes`. Error on a broken connection.
LinkMeasure measure_link(int fd, int pings, int transfers, size_t bytes);

}  // namespace cohort::probe
