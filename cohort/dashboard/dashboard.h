// Dashboard: the live dashboard of one job: a DashboardState (state.h) fed
// by a thread that polls the job's store every `poll_period`, served by a
// DashboardServer (server.h). Its host adds what it knows to state():
// cohortrun the job's phase, failure report, ranks' processes and elastic
// changes; rank 0 under torchrun, mpirun or srun (start_dashboard_from_env)
// only that the job runs.
//
//   auto dashboard = std::make_unique<Dashboard>(DashboardOptions{...}, store);
//   std::fprintf(stderr, "dashboard at %s\n", dashboard->url().c_str());
//   ...
//   dashboard->state().set_phase(JobPhase::finished);
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/dashboard/server.h"
#include "cohort/dashboard/state.h"
#include "cohort/rendezvous/store.h"

namespace cohort::dashboard {

struct DashboardOptions {
  bool serve = true;      // false: keep the state (for a report), serve nothing
  ServerAddress address;  // where to serve (loopback unless given)
  std::string secret;     // the job secret: the token of a non-loopback bind
  StateOptions state;     // state.size: the job's ranks
  std::chrono::milliseconds poll_period{500};
};

class Dashboard {
 public:
  // `store`: a thread-safe client of the job's root store (or the store
  // itself). Starts serving and polling; throws ConfigError as
  // DashboardServer does.
  Dashboard(DashboardOptions options, std::shared_ptr<rendezvous::Store> store);
  // Stops polling and serving.
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  DashboardState& state() { return state_; }
  // The page's address (with its token when one is needed); "" and 0
  // without a server.
  std::string url() const { return server_ ? server_->url() : std::string(); }
  int port() const { return server_ ? server_->port() : 0; }
  // Polls the store now (before a final status or report); store errors
  // are swallowed as the poller's are.
  void poll_now();
  // The /api/status document now.
  std::string status_json() const;

 private:
  void loop();

  DashboardOptions options_;
  std::shared_ptr<rendezvous::Store> store_;
  DashboardState state_;
  std::mutex poll_mutex_;  // one poll at a time (the poller and poll_now())
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool store_error_said_ = false;
  std::unique_ptr<DashboardServer> server_;
  std::thread thread_;
};

// For rank 0 outside cohortrun (torchrun, mpirun, srun): when
// COHORT_DASHBOARD ([ADDR:]PORT) is set and `rank` is 0, starts a
// Dashboard over `store` (the job's root store) with the job secret from
// COHORT_SECRET, prints "cohort: dashboard at URL" on stderr and returns
// it; nullptr otherwise (other ranks, variable unset). The job shows as
// running from the first step; it is finished when the returned object is
// destroyed (which stops serving). ConfigError for a malformed variable or
// an address that cannot be served.
std::unique_ptr<Dashboard> start_dashboard_from_env(std::shared_ptr<rendezvous::Store> store, int rank, int size);

}  // namespace cohort::dashboard
