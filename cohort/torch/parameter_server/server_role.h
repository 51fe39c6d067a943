// ServerRole: what a server process of a parameter-server job does, from
// start to end (the parameter_server strategy's server ranks; ps-lite's
// server role): it serves the partitions it owns (ps::Server,
// cohort/parameter_server/server.h) until every worker has finished, and in
// an elastic job (cohortrun --min-np) it follows the job's membership
// meanwhile, since every server is a member of each epoch's world though it
// keeps none of training's state.
//
//   ServerRole server({.role = role, .job = job, .launch = info, .store = ps_store, .ns = ns});
//   return server.run();   // 0 once the workers are done; 1 on an error (said on stderr)
//
// Elastic jobs: roles follow slots (the strategy's doing). A thread follows
// the epochs from construction on: when the launcher publishes a new one (or
// abandons the current world), it forms the new world with the others
// (cohort::reform()) and takes part in the split that gives the workers
// their group (workers_group.h), as the workers' rejoin() does. The
// membership's end (the launcher ended the job, or left this process out)
// ends run() with status 0. A replacement of a server's slot (incarnation >
// 0) serves nothing: the lost server's partitions stay with the server that
// took them over (its replica); it only follows the membership, until the
// launcher ends it when training is over.
//
// Lifetime: run() returns once serving is over and everything it started
// has ended: the server's sockets are closed (the ps::Server destroyed: its
// ipc socket file removed, its tcp port free) and the follower thread
// joined. A formation of a world in progress when serving ends is waited
// for: it ends by itself, with the new world formed, or with the job ended
// (once the workers exit, the launcher ends the membership, which a world
// forming gives way to) or failed by its communicators' timeout; the thread
// then sees that it must stop. Nothing here ends the process.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/transport_options.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/store.h"

namespace cohort {

namespace ps {
class Server;
}

struct ServerRoleOptions {
  ps::Role role;  // a server's (role.server)
  ps::JobOptions job;
  // The job as launched: the servers' secret and job id, where the store is
  // (which address other hosts reach the server on), and in an elastic job
  // this process's slot and incarnation.
  rendezvous::LaunchInfo launch;
  // Where servers and workers meet (server addresses, ...): a namespace of
  // the job's store.
  std::shared_ptr<rendezvous::Store> store;
  // Elastic jobs (cohort::elastic() of init()'s world): the namespace of the
  // workers' group splits (split_world_workers()), the workers' own.
  bool elastic = false;
  std::string ns;
};

class ServerRole {
 public:
  // Binds the server's sockets and publishes its address (not on a
  // replacement of a server's slot) and, in an elastic job, starts
  // following the membership. ConfigError for a worker's role.
  explicit ServerRole(ServerRoleOptions options);
  // stop(), then waits as run() does for what is still running.
  ~ServerRole();
  ServerRole(const ServerRole&) = delete;
  ServerRole& operator=(const ServerRole&) = delete;

  // Serves until every worker has finished (or died), stop(), or the end of
  // the membership; returns the process's exit status: 0, or 1 after an
  // error (the server declared lost, a failed formation), said on stderr.
  // Once (ConfigError after).
  int run();
  // run() returns soon, from any thread (also before run()).
  void stop();

  // Where the server listens (the ipc socket file and tcp endpoint); null
  // on a replacement of a server's slot, which serves nothing, and after
  // run().
  const ps::ServerAddress* address() const;

 private:
  class MembershipFollower;
  // Ends the follower (joined) and the server (destroyed).
  void release();

  ServerRoleOptions options_;
  bool spare_ = false;  // an elastic replacement of a server's slot
  bool ran_ = false;
  std::atomic<bool> stopping_{false};
  // The follower's verdict when the membership ended (or failed).
  std::atomic<int> membership_status_{-1};
  std::shared_ptr<rendezvous::Store> job_store_;  // elastic: the world's, for the membership's end
  std::mutex server_mutex_;                       // stop() against release()
  std::unique_ptr<ps::Server> server_;
  std::unique_ptr<MembershipFollower> follower_;
};

}  // namespace cohort
