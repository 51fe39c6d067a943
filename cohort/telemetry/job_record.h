// The job-level records of the telemetry keys (keys.h): what the chief says
// about the run (JobRecord), each finished epoch's logs (EpochRecord), and
// events (EventRecord). JSON forms are stable (docs/dashboard.md).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/rendezvous/store.h"
#include "cohort/telemetry/rank_sample.h"

namespace cohort::telemetry {

struct JobRecord {
  std::string strategy;  // Strategy::description()
  std::string backend;   // the communicator backend (shm, gloo, ...)
  int size = 0;          // processes
  int replicas = 0;      // replicas in sync
  int64_t global_batch = 0;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double unix_time_s = 0;  // when fit() started
};

struct EpochRecord {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;   // steps since training started, at the epoch's end
  double unix_time_s = 0;
  std::map<std::string, double> logs;  // fit()'s epoch logs (loss, accuracy, val_loss, ...)
};

struct EventRecord {
  double unix_time_s = 0;
  std::string kind;     // "membership", "failure", "straggler", "preemption", ...
  std::string message;  // one line for people
};

std::string to_json(const JobRecord& r);
std::string to_json(const EpochRecord& r);
std::string to_json(const EventRecord& r);
JobRecord job_record_from_json(std::string_view text, std::string_view source = "job record");
EpochRecord epoch_record_from_json(std::string_view text, std::string_view source = "epoch record");
EventRecord event_record_from_json(std::string_view text, std::string_view source = "event record");

// Writers (the chief, or the launcher for events). publish_epoch() writes
// record i = r.epoch's position in the run and raises the count to i + 1
// (never lowers it: a redone epoch overwrites its record).
void publish_job(rendezvous::Store& store, const JobRecord& r);
void publish_epoch(rendezvous::Store& store, int64_t index, const EpochRecord& r);
void publish_event(rendezvous::Store& store, const EventRecord& r);

// Readers (rank 0's straggler detector, the dashboard), without waiting:
// a key's value when it is set; the latest sample of each rank in [0,
// ranks) that has published one.
std::optional<std::string> value_if_set(rendezvous::Store& store, const std::string& key);
std::vector<RankSample> read_rank_samples(rendezvous::Store& store, int ranks);

double unix_now_s();

}  // namespace cohort::telemetry
