// TcpStore: a Store served over TCP by a TcpStoreServer (in cohortrun, or in
// rank 0 under torchrun/mpirun/srun).
//
// Security (docs/security.md): the handshake is mutual (auth.h). The server
// proves the job secret to the client as the client proves it to the server,
// over nonces of both, so a client never talks to a store that does not know
// the secret, and every frame after the handshake carries an HMAC under a key
// of that connection with a sequence number, so a frame altered, replayed,
// reordered or injected on the way ends the connection (ConfigError at the
// handshake, PeerLostError later). Frames are not encrypted: the store holds
// addresses, not secrets.
//
// A client with the wrong secret gets one error frame and is disconnected;
// the server logs the refused peer address and never serves it. An empty
// secret is allowed only when both sides use it, and the server then serves
// only a loopback address (other users of this machine can still connect,
// with a warning) unless COHORT_ALLOW_INSECURE_STORE=1. Strangers are capped:
// a connection that has not finished the handshake in `auth_timeout` is
// closed, and at most `max_handshakes` connections are in the handshake at
// once (new ones wait in the kernel's backlog meanwhile).
#pragma once

#include <memory>
#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind
  int port = 0;                  // 0 picks a free port; see port()
  std::string secret;            // the job secret clients must prove
  // A connection that has not finished the handshake within this time is
  // closed, so that idle strangers cannot hold descriptors.
  Duration auth_timeout{std::chrono::seconds(10)};
  // Most connections in the handshake at once; further ones are accepted
  // only as these finish or time out.
  int max_handshakes = 64;
};

// Whether `host` is a loopback address ("localhost", 127.0.0.0/8, ::1),
// without resolving names.
bool is_loopback_host(const std::string& host);

// Whether `host` is, or resolves to, loopback addresses only (a name that
// /etc/hosts maps to 127.0.1.1 included); false when it does not resolve.
bool resolves_to_loopback(const std::string& host);

// Serves the store from a background thread until destroyed. Throws
// ConfigError naming the address when the port cannot be bound (in use), or
// when `secret` is empty and the address is not loopback (see above).
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
  // after the client); COHORT_STORE_CONNECT_TIMEOUT_S when unset. Errors
  // that retrying cannot fix end it at once with a ConfigError: no route to
  // the host (ENETUNREACH, EHOSTUNREACH), and a refused connection when
  // `server_listening`.
  Duration connect_timeout{0};
  // The server listened before this client was started (cohortrun serves
  // the store before it starts any rank): a refused connection means that
  // nothing will ever listen at this address, so it is not retried. False
  // when the server may still be starting (rank 0 serves it under torchrun,
  // mpirun or srun).
  bool server_listening = false;
};

// A client. Thread-safe: one connection whose requests carry ids, so calls
// from several threads are in flight together and a get or wait parked on
// the server never holds back another thread's call (a background thread
// reads the replies). Throws ConfigError when the secret is refused or the
// server cannot prove it, TimeoutError when the server cannot be reached in
// time, PeerLostError when the connection drops or a reply fails its
// integrity check later.
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
