#include "cohort/dashboard/dashboard.h"

#include <cstdio>
#include <exception>

#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/telemetry/job_record.h"

namespace cohort::dashboard {

Dashboard::Dashboard(DashboardOptions options, std::shared_ptr<rendezvous::Store> store)
    : options_(std::move(options)), store_(std::move(store)), state_(options_.state) {
  if (options_.serve)
    server_ = std::make_unique<DashboardServer>(ServerOptions{.address = options_.address, .secret = options_.secret},
                                                [this] { return status_json(); });
  thread_ = std::thread([this] { loop(); });
}

Dashboard::~Dashboard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  server_.reset();
}

std::string Dashboard::status_json() const { return state_.status_json(telemetry::unix_now_s()); }

void Dashboard::poll_now() {
  std::lock_guard<std::mutex> lock(poll_mutex_);
  try {
    state_.poll(*store_);
    store_error_said_ = false;
  } catch (const std::exception& e) {
    // The store went away (the job ended) or a record is malformed: the
    // last state stays on the page; said once until a poll works again.
    if (!store_error_said_) COHORT_LOG(warn) << "dashboard: cannot read the job's telemetry: " << e.what();
    store_error_said_ = true;
  }
}

void Dashboard::loop() {
  for (;;) {
    poll_now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_for(lock, options_.poll_period, [&] { return stop_; })) return;
  }
}

std::unique_ptr<Dashboard> start_dashboard_from_env(std::shared_ptr<rendezvous::Store> store, int rank, int size) {
  const std::string where = tunables::dashboard();
  if (where.empty() || rank != 0) return nullptr;
  DashboardOptions options{.address = parse_server_address(where, "COHORT_DASHBOARD"),
                           .secret = tunables::secret(),
                           .state = {.size = size}};
  auto dashboard = std::make_unique<Dashboard>(std::move(options), std::move(store));
  std::fprintf(stderr, "cohort: dashboard at %s\n", dashboard->url().c_str());
  std::fflush(stderr);
  return dashboard;
}

}  // namespace cohort::dashboard
