// TcpStore: a Store served over TCP by a TcpStoreServer (in cohortrun, or in
// rank 0 under torchrun/mpirun/srun).
//
// Authentication: on connect the server sends a random nonce; the client
// answers HMAC-SHA256(secret, nonce) and the server compares in constant
// time. A client with the wrong secret gets one error reply and is
// disconnected, and the server logs the refused peer address; it is never
// served. An empty secret is allowed only when both sides use it (tests,
// single-user machines) and is logged as a warning by the server.
#pragma once

#include <memory>
#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind
  int port = 0;                  // 0 picks a free port; see port()
  std::string secret;            // the job secret clients must prove
  // A connection that has not authenticated within this time is closed, so
  // that idle strangers cannot hold descriptors.
  Duration auth_timeout{std::chrono::seconds(30)};
};

// Serves the store from a background thread until destroyed. Throws
// ConfigError naming the address when the port cannot be bound (in use).
class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  // Connections refused for a wrong secret so far (for tests and logs).
  int refused_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string secret;
  // How long to keep retrying the initial connection (the server may start
  // after the client); COHORT_STORE_CONNECT_TIMEOUT_S when unset.
  Duration connect_timeout{0};
};

// A client. Thread-safe: one connection whose requests carry ids, so calls
// from several threads are in flight together and a get or wait parked on
// the server never holds back another thread's call (a background thread
// reads the replies). Throws ConfigError when the secret is refused,
// TimeoutError when the server cannot be reached in time, PeerLostError when
// the connection drops later.
class TcpStore : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(std::span<const std::string> keys, Duration timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool remove(const std::string& key) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::rendezvous
