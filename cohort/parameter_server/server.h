// Server: one parameter-server process (or thread), serving the partitions
// it owns and keeping replicas of others.
//
// Construction binds the sockets (transport.h) and publishes the address in
// the store as "server/<index>"; run() serves requests on one thread until
// every worker has left (bye) or died, or shutdown arrives. The server
// declares a worker dead after COHORT_PS_WORKER_TIMEOUT_S of silence (its
// client pings every COHORT_PS_HEARTBEAT_MS, so silence means a dead or hung
// process), drops its uncommitted step and lets synchronous steps complete
// without it. When a worker reports a server lost it asks that server's
// successor to promote(): the successor takes the partition over from its
// replica or, without one, from the last checkpoint, and logs how many
// updates the workers had seen that the restored state lacks. A server that
// finds itself marked lost in the store ("dead/<index>": a worker gave up on
// it) stops serving, so a partition never has two live owners.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cohort/parameter_server/counters.h"
#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/transport_options.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/store.h"

namespace cohort::ps {

struct ServerOptions {
  int server = 0;  // index among the servers
  int num_servers = 1;
  int num_workers = 1;
  JobOptions job;
  std::string secret;
  std::string job_id = "local";
  std::string tcp_host = "127.0.0.1";  // where other hosts reach this server; empty: ipc only
  bool ipc = true;
  Millis worker_timeout{10000};
  Millis first_contact_timeout{300000};  // a worker that never says hello
};
// heartbeat/timeouts from the COHORT_PS_* and COHORT_TIMEOUT_S tunables.
ServerOptions server_options_from_env();
// server_options_from_env() for server `role` of the job `info` describes:
// its secret and id, and a tcp endpoint on loopback when the job's store is
// local, else on the address that routes toward the store's host (the
// interface other hosts reach).
ServerOptions server_options_for(const rendezvous::LaunchInfo& info, const Role& role, const JobOptions& job);

// Store keys (relative to the parameter-server namespace of the job).
std::string server_address_key(int server);
std::string server_dead_key(int server);

class Server {
 public:
  Server(std::shared_ptr<rendezvous::Store> store, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const ServerAddress& address() const;
  // Serves until the workers are gone, shutdown, or stop(). Throws
  // PeerLostError when this server was declared lost.
  void run();
  void stop();  // any thread

  // Counters of every partition and replica, as "key=value" lines.
  std::string stats() const;
  // The counters of the partitions this server owns (not its replicas),
  // merged (counts added, the largest max_staleness): set when run()
  // returns, all zero before.
  PartitionCounters totals() const;
  int refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::ps
