// Status: one snapshot of what the dashboard shows, and its JSON form, the
// body of GET /api/status (docs/dashboard.md; schema in
// status.schema.json, "schema": "cohort.dashboard.status/1"). Field names
// are stable: other tools read them. A field is only ever added, never
// renamed or removed, within one schema version.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/dashboard/history.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/rank_sample.h"
#include "cohort/telemetry/straggler.h"

namespace cohort::dashboard {

inline constexpr const char* kStatusSchema = "cohort.dashboard.status/1";

// starting: no rank has reported a step yet; running: some have; finished:
// every rank ended well; failed: a rank failed or the job was stopped
// (`failure` says which rank and how).
enum class JobPhase { starting, running, finished, failed };
const char* phase_name(JobPhase phase);

// Where a rank's steps went, in milliseconds summed over the steps the
// dashboard saw (each sample's per-step means times the steps since the
// sample before it).
struct TimeSplit {
  double compute_ms = 0;
  double wait_ms = 0;  // peer wait + transfer (rank_sample.h)
  double input_ms = 0;
  double checkpoint_ms = 0;
  double other_ms = 0;  // fit()'s bookkeeping and callbacks
};

struct RankStatus {
  int rank = 0;
  std::string host;  // the launcher's or the sample's
  int64_t pid = 0;
  std::optional<telemetry::RankSample> sample;  // the latest; none before the rank's first
  double heartbeat_age_s = -1;                  // now - the sample's time; -1 without one
  std::string ended;  // "exited with code 0", "was killed by signal 9 (SIGKILL)"; "" while running
  TimeSplit time;
  std::vector<Point> step_ms;  // x: step, y: mean step time (ms); downsampled
};

struct MetricStatus {
  std::string name;           // an epoch log: loss, accuracy, val_loss, ...
  std::vector<Point> points;  // x: epoch (0-based), y: the value; downsampled
};

struct Status {
  double unix_time_s = 0;
  JobPhase phase = JobPhase::starting;
  std::string failure;  // the launcher's failure report (failed only)
  std::optional<telemetry::JobRecord> job;
  std::optional<telemetry::StragglerVerdict> straggler;  // rank 0's latest verdict
  std::vector<RankStatus> ranks;                         // by rank
  int64_t epochs = 0;                                    // epoch records published
  std::optional<telemetry::EpochRecord> last_epoch;
  std::vector<MetricStatus> metrics;           // by name
  std::vector<telemetry::EventRecord> events;  // the latest, oldest first
  int64_t events_total = 0;                    // events seen, including those no longer kept
};

// The /api/status document: one JSON object, one line.
std::string to_json(const Status& status);

}  // namespace cohort::dashboard
