#include "cohort/torch/parameter_server/server_role.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/common/logging.h"
#include "cohort/parameter_server/server.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/parameter_server/workers_group.h"

namespace cohort {

// Follows an elastic job's membership epochs on a thread of its own (see
// the header); `on_end` gets the process's exit status when the membership
// ends for this process (0: the job ended or left it out; 1: an error).
class ServerRole::MembershipFollower {
 public:
  MembershipFollower(std::string ns, ps::Role role, std::function<void(int)> on_end)
      : ns_(std::move(ns)), role_(role), on_end_(std::move(on_end)), thread_([this] { run(); }) {}
  ~MembershipFollower() { stop(); }
  // Stops following and joins the thread: a world's formation in progress
  // is let finish (it cannot be interrupted; see the header for why it
  // ends).
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    using namespace std::chrono_literals;
    while (!stopping_) {
      std::this_thread::sleep_for(20ms);
      try {
        if (!membership_changed() && !world_abandoned()) continue;
        reform();
        split_world_workers(ns_, role_);
        COHORT_LOG(info) << "parameter server " << role_.index << ": membership epoch " << membership_epoch()
                         << ", rank " << rank() << " of " << size();
      } catch (const comm::ElasticLeave& e) {
        return end(0, std::string("left the job: ") + e.what());
      } catch (const rendezvous::MembershipEnded& e) {
        return end(0, std::string("the job ended: ") + e.what());
      } catch (const PeerLostError& e) {
        // A member lost while the workers' group formed: the next epoch.
        COHORT_LOG(warn) << "parameter server " << role_.index << ": " << e.what() << "; following the next epoch";
      } catch (const std::exception& e) {
        return end(1, e.what());
      }
    }
  }
  void end(int status, const std::string& why) {
    if (status == 0) COHORT_LOG(info) << "parameter server " << role_.index << ": " << why;
    else COHORT_LOG(error) << "parameter server " << role_.index << ": " << why;
    on_end_(status);
  }

  std::string ns_;
  ps::Role role_;
  std::function<void(int)> on_end_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

ServerRole::ServerRole(ServerRoleOptions options) : options_(std::move(options)) {
  const ps::Role& role = options_.role;
  COHORT_CHECK_AS(ConfigError, role.server)
      << "ServerRole: worker " << role.index << " is not a server (ps::assign_role gave it a worker's role)";
  spare_ = options_.elastic && options_.launch.elastic_incarnation > 0;
  if (!spare_)
    server_ = std::make_unique<ps::Server>(options_.store, ps::server_options_for(options_.launch, role, options_.job));
  if (options_.elastic) {
    // Held now: the membership's end takes the world away.
    job_store_ = world_store();
    follower_ = std::make_unique<MembershipFollower>(options_.ns, role, [this](int status) {
      membership_status_ = status;
      stop();
    });
  }
}

ServerRole::~ServerRole() {
  stop();
  release();
}

void ServerRole::stop() {
  stopping_ = true;
  std::lock_guard lock(server_mutex_);
  if (server_) server_->stop();
}

void ServerRole::release() {
  // The follower first: its end stops the server, under the mutex.
  if (follower_) follower_->stop();
  follower_.reset();
  std::lock_guard lock(server_mutex_);
  server_.reset();
}

const ps::ServerAddress* ServerRole::address() const { return server_ ? &server_->address() : nullptr; }

int ServerRole::run() {
  COHORT_CHECK_AS(ConfigError, !ran_) << "parameter server " << options_.role.index << ": run() serves once";
  ran_ = true;
  const ps::Role& role = options_.role;
  int status = 0;
  try {
    if (spare_) {
      COHORT_LOG(info) << "parameter server slot " << options_.launch.elastic_slot << " started again: its "
                       << "partitions stay with the server that took them over; this process only follows the "
                       << "membership";
      // Until training is over: the launcher ends the membership when the
      // first member (a worker) exits 0. The follower sees the end only in
      // a formation, this loop at once.
      try {
        while (!stopping_) {
          rendezvous::throw_if_ended(*job_store_);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      } catch (const rendezvous::MembershipEnded&) {
      }
    } else {
      COHORT_LOG(info) << "parameter server " << role.index << " of " << role.num_servers << " serving "
                       << role.num_workers << " worker(s): " << ps::describe(options_.job);
      server_->run();
      // What the consistency rules did, for the user (and the backup_workers
      // test): late_dropped counts gradients a step went on without.
      const ps::PartitionCounters c = server_->totals();
      COHORT_LOG(info) << "parameter server " << role.index << " done: steps_applied=" << c.steps_applied
                       << " late_dropped=" << c.late_dropped << " stale_ignored=" << c.stale_ignored
                       << " discarded_steps=" << c.discarded_steps << " max_staleness=" << c.max_staleness
                       << " restores=" << c.restores;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parameter server %d: %s\n", role.index, e.what());
    status = 1;
  }
  release();
  // The membership's end (or the follower's failure) decided, when it came.
  const int membership = membership_status_;
  if (status == 0 && membership > 0) status = membership;
  return status;
}

}  // namespace cohort
