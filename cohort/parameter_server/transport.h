// Transport: requests and replies between any worker and any server, in any
// order, over ZeroMQ (Debian's libzmq, the library ps-lite is built on).
//
// A server binds one ROUTER socket on two endpoints: tcp:// on the address
// other hosts reach it at, and ipc:// (a Unix socket file, mode 0600) for
// clients on its own host, which skips TCP's loopback stack. A client holds
// one DEALER socket per server and picks ipc:// when the server's host key
// equals its own (net::host_key(), common/host_key.h: an emulated host of
// scripts/cluster.sh is a host of its own), tcp:// otherwise. Both are
// authenticated with the job secret (credentials.h); bench/README.md ("The transport")
// has the measurement behind choosing ZeroMQ over cohort's communicators.
//
// The Client runs one I/O thread that owns the sockets: any thread submits
// a request and gets a Handle; the reply is passed to the request's ReplyFn
// on the I/O thread, then the handle completes. Requests addressed to a
// partition (a logical server) follow the partition's route, which
// reroute() moves to another server after a failover, resending what the
// old server had not settled. The I/O thread pings idle servers every
// heartbeat; a server silent for server_timeout, or whose connection closed
// and did not come back within reconnect_grace, is lost: the lost handler
// runs on a thread of its own (it may block on requests), and requests to a
// lost server wait for reroute() or fail.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cohort/parameter_server/handle.h"
#include "cohort/parameter_server/transport_options.h"
#include "cohort/parameter_server/wire.h"

namespace cohort::ps {

struct ServerSocketOptions {
  std::string secret;                 // the job secret
  std::string tcp_host = "127.0.0.1"; // address to bind and publish; empty: no tcp endpoint
  bool ipc = true;                    // also listen on an ipc:// socket file
  std::string job_id = "local";       // names the socket file (removed by cohortrun at exit)
  std::string tcp_security = tcp_security_choice();
};

class ServerSocket {
 public:
  explicit ServerSocket(const ServerSocketOptions& options);
  ~ServerSocket();  // removes the socket file
  ServerSocket(const ServerSocket&) = delete;
  ServerSocket& operator=(const ServerSocket&) = delete;

  const ServerAddress& address() const { return address_; }

  // Waits until a request can be received, `wake_fd` (an eventfd, -1 for
  // none) is readable, or `timeout` passes; answers authentication requests
  // meanwhile. True when wake_fd is readable.
  bool wait(Millis timeout, int wake_fd);
  // The next request and the peer it came from; false when none is waiting.
  bool receive(Message& message, std::string& peer);
  void reply(const std::string& peer, Message& message);

  // Connections refused: credentials not derived from the job secret, or a
  // handshake that failed (a client holding the wrong server key).
  int refused() const;

 private:
  void drain_monitor();
  zmq::context_t context_;
  struct Zap;
  std::unique_ptr<Zap> zap_;
  zmq::socket_t router_, ipc_router_;    // CURVE on tcp, PLAIN on ipc: one mechanism per socket
  zmq::socket_t monitor_, ipc_monitor_;  // their handshake events
  ServerAddress address_;
  std::string ipc_path_;
  std::atomic<int> failed_handshakes_{0};  // read by other threads
};

// Runs on the I/O thread with the reply (status ok); copies values out.
// Throwing fails the handle with that error.
using ReplyFn = std::function<void(Message& reply)>;

struct Target {
  int partition = -1;  // routed through route(); survives failover
  int server = -1;     // a physical server; fails when it is lost
  static Target to_partition(int p) { return {p, -1}; }
  static Target to_server(int s) { return {-1, s}; }
};

struct RequestOptions {
  // Keep the request after its reply, until a reply from the partition says
  // the worker's step `header.step` is settled, and resend it on reroute.
  bool retain = false;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();  // fails what is pending, closes without lingering
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }

  void add_server(int server, const ServerAddress& address);
  void route(int partition, int server);
  int route_of(int partition) const;

  Handle request(Target target, Message message, ReplyFn on_reply, std::string what,
                 RequestOptions options = {});
  // The same as one part of `group` (HandleState::group): returns nothing,
  // the group's handle completes when all its parts have.
  void request_part(const std::shared_ptr<HandleState>& group, Target target, Message message, ReplyFn on_reply,
                    std::string what, RequestOptions options = {});

  // Called once per lost server, on the client's failover thread. Without
  // a handler, requests to a lost server fail with PeerLostError.
  void set_lost_handler(std::function<void(int server, const std::string& why)> handler);
  // Stops the failover thread, waiting for a handler that runs (its
  // requests still go out): the handler's owner calls it before it goes.
  // Lost servers after it are not handled.
  void stop_failover();

  // Moves `partition` to `server`: sends `preamble` there first, then the
  // partition's retained and pending requests in their original order.
  void reroute(int partition, int server, Message preamble);
  // Fails the pending requests of `partition` (nothing to reroute to) and
  // forgets its retained ones.
  void fail_partition(int partition, const std::string& why);
  // The timeline stamped into requests from now on (Header::timeline);
  // requests made before keep theirs, replayed or not.
  void set_timeline(uint64_t timeline);
  uint64_t timeline() const;

  // Takes `server` for lost now, as if it had stopped answering (another
  // client found it so: its mark in the store): the lost handler runs.
  void declare_lost(int server, const std::string& why);

  bool lost(int server) const;
  TransportCounters counters() const;

 private:
  void submit(Target target, Message message, ReplyFn on_reply, std::shared_ptr<HandleState> state,
              RequestOptions options);
  struct Impl;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::ps
