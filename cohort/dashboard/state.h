// DashboardState: the dashboard's model of a running job, fed from two
// sides and read as a Status (status.h):
//   - the job's store, polled (poll()): the telemetry keys the ranks and
//     rank 0 write (cohort/telemetry/keys.h) and, in an elastic job, the
//     membership epochs the launcher publishes (a change is an event);
//   - whoever hosts the dashboard (cohortrun; rank 0 under torchrun,
//     mpirun or srun): the job's phase and failure report, the ranks'
//     processes, events of its own.
// The history it keeps is bounded whatever the run's length: per rank one
// downsampled step-time series, per epoch log one series, the latest
// `max_events` events (history.h). Thread-safe: the poller, the launcher
// and the HTTP server's threads call it together.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/dashboard/history.h"
#include "cohort/dashboard/status.h"
#include "cohort/rendezvous/store.h"

namespace cohort::dashboard {

struct StateOptions {
  int size = 0;             // ranks the job starts with (more appear as they report)
  size_t points = 240;      // per series (even)
  size_t max_events = 200;  // events kept (all are counted)
  // status_json() answers from the document it built last while nothing
  // changed and it is younger than this (heartbeat ages then lag by at
  // most this much): a page in every browser tab, each polling every
  // second, costs one build per change, not one per request.
  double max_status_age_s = 0.25;
};

class DashboardState {
 public:
  explicit DashboardState(StateOptions options = {});

  // ---- the host's side ----
  // `failure` is the failure report (failed) or how the job was stopped.
  void set_phase(JobPhase phase, std::string failure = {});
  void set_rank_process(int rank, std::string host, int64_t pid);
  void set_rank_ended(int rank, std::string how);
  void add_event(telemetry::EventRecord event);

  // ---- the store's side ----
  // Reads what changed since the last poll; throws what the store throws
  // (the job's store is gone), and ConfigError for a malformed record.
  void poll(rendezvous::Store& store);
  // A sample as poll() takes it (for tests and the benchmark's synthetic
  // state): updates the rank's row, history and time split.
  void add_sample(const telemetry::RankSample& sample);
  void add_epoch(const telemetry::EpochRecord& record);
  void set_job(const telemetry::JobRecord& job);
  void set_straggler(const telemetry::StragglerVerdict& verdict);

  // ---- readers ----
  // A snapshot at `now_unix_s` (heartbeat ages are relative to it).
  Status status(double now_unix_s) const;
  // to_json(status(now)): the /api/status body (or the last one built,
  // see StateOptions::max_status_age_s).
  std::string status_json(double now_unix_s) const;
  JobPhase phase() const;

 private:
  struct RankTrack {
    std::string host;
    int64_t pid = 0;
    std::string ended;
    std::optional<telemetry::RankSample> sample;
    int64_t last_step = 0;
    TimeSplit time;
    Series step_ms;
  };
  RankTrack& track(int rank);
  void add_sample_locked(const telemetry::RankSample& s);
  void add_event_locked(telemetry::EventRecord e);
  void add_epoch_locked(int64_t index, const telemetry::EpochRecord& r);

  StateOptions options_;
  mutable std::mutex mutex_;
  JobPhase phase_ = JobPhase::starting;
  std::string failure_;
  std::optional<telemetry::JobRecord> job_;
  std::optional<telemetry::StragglerVerdict> straggler_;
  std::map<int, RankTrack> ranks_;
  int64_t epochs_read_ = 0;
  std::optional<telemetry::EpochRecord> last_epoch_;
  std::map<std::string, Series> metrics_;
  std::vector<telemetry::EventRecord> events_;
  int64_t events_total_ = 0;
  int64_t store_events_read_ = 0;
  int64_t membership_epoch_ = -1;
  uint64_t version_ = 0;  // counts changes; the cache below is of one version
  mutable std::string cached_json_;
  mutable uint64_t cached_version_ = 0;
  mutable double cached_at_ = 0;
};

}  // namespace cohort::dashboard
