// What a parameter-server client and server need to know about the
// transport without seeing ZeroMQ: addresses, client options, counters.
// transport.h has the sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort::ps {

inline constexpr uint32_t kNoWorker = 0xffffffffu;

using Millis = std::chrono::milliseconds;

// Where a server listens, as it publishes it in the store.
struct ServerAddress {
  std::string host_key;
  std::string tcp;  // tcp://10.1.2.3:41234, or empty
  std::string ipc;  // ipc:///dev/shm/cohort-<job>-ps-..., or empty
  std::string tcp_security = "curve";  // how the tcp endpoint authenticates: curve or plain
  std::string encode() const;
  static ServerAddress decode(std::string_view text);  // ConfigError when malformed
};

// How tcp endpoints authenticate (COHORT_PS_TCP_SECURITY): "curve" (keys
// derived from the job secret; every message encrypted) or "plain" (a
// password derived from the job secret, sent in clear: it keeps out anyone
// without the secret, but not someone who can read the network).
std::string tcp_security_choice();

// The transports a client may use: "auto" (ipc on the same host, else tcp),
// "tcp" or "ipc"; COHORT_PS_TRANSPORT by default.
std::string transport_choice();

struct ClientOptions {
  std::string secret;
  std::string name = "client";  // logs and routing ids
  uint32_t worker = kNoWorker;  // stamped into every request
  uint32_t incarnation = 0;
  std::string transport = "auto";
  Millis heartbeat{1000};
  Millis server_timeout{10000};
  Millis reconnect_grace{500};
};
// The options with heartbeat and timeouts from the COHORT_PS_* tunables.
ClientOptions client_options_from_env();

struct TransportCounters {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;      // payload and header bytes handed to ZeroMQ
  uint64_t bytes_received = 0;
};

}  // namespace cohort::ps
