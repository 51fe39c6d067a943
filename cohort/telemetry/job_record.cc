#include "cohort/telemetry/job_record.h"

#include <chrono>
#include <limits>
#include <span>

#include "cohort/common/json.h"
#include "cohort/common/json_object.h"
#include "cohort/telemetry/keys.h"

namespace cohort::telemetry {

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string to_json(const JobRecord& r) {
  return JsonObject()
      .add("strategy", r.strategy)
      .add("backend", r.backend)
      .add("size", r.size)
      .add("replicas", r.replicas)
      .add("global_batch", r.global_batch)
      .add("epochs", r.epochs)
      .add("steps_per_epoch", r.steps_per_epoch)
      .add("unix_time_s", r.unix_time_s, 17)
      .str();
}

std::string to_json(const EpochRecord& r) {
  JsonObject logs;
  for (const auto& [name, value] : r.logs) logs.add(name, value, 9);
  return JsonObject()
      .add("epoch", r.epoch)
      .add("step", r.step)
      .add("unix_time_s", r.unix_time_s, 17)
      .add_raw("logs", logs.str())
      .str();
}

std::string to_json(const EventRecord& r) {
  return JsonObject().add("unix_time_s", r.unix_time_s, 17).add("kind", r.kind).add("message", r.message).str();
}

JobRecord job_record_from_json(std::string_view text, std::string_view source) {
  const json::Value v = json::parse(text, source);
  return {.strategy = v.at("strategy").string(),
          .backend = v.at("backend").string(),
          .size = static_cast<int>(v.at("size").number()),
          .replicas = static_cast<int>(v.at("replicas").number()),
          .global_batch = static_cast<int64_t>(v.at("global_batch").number()),
          .epochs = static_cast<int64_t>(v.at("epochs").number()),
          .steps_per_epoch = static_cast<int64_t>(v.at("steps_per_epoch").number()),
          .unix_time_s = v.at("unix_time_s").number()};
}

EpochRecord epoch_record_from_json(std::string_view text, std::string_view source) {
  const json::Value v = json::parse(text, source);
  EpochRecord r{.epoch = static_cast<int64_t>(v.at("epoch").number()),
                .step = static_cast<int64_t>(v.at("step").number()),
                .unix_time_s = v.at("unix_time_s").number()};
  for (const auto& [name, value] : v.at("logs").members())
    r.logs[name] = value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.number();
  return r;
}

EventRecord event_record_from_json(std::string_view text, std::string_view source) {
  const json::Value v = json::parse(text, source);
  return {
      .unix_time_s = v.at("unix_time_s").number(), .kind = v.at("kind").string(), .message = v.at("message").string()};
}

std::optional<std::string> value_if_set(rendezvous::Store& store, const std::string& key) {
  if (!store.check(std::span<const std::string>(&key, 1))) return std::nullopt;
  return store.get(key);
}

std::vector<RankSample> read_rank_samples(rendezvous::Store& store, int ranks) {
  std::vector<RankSample> samples;
  for (int r = 0; r < ranks; ++r) {
    const std::string key = keys::rank_sample(r);
    if (std::optional<std::string> text = value_if_set(store, key))
      samples.push_back(rank_sample_from_json(*text, key));
  }
  return samples;
}

void publish_job(rendezvous::Store& store, const JobRecord& r) { store.set(keys::kJob, to_json(r)); }

void publish_epoch(rendezvous::Store& store, int64_t index, const EpochRecord& r) {
  store.set(keys::epoch(index), to_json(r));
  // Raise the count to index + 1, never lower it (a redone epoch's record
  // is overwritten in place; readers see every index below the count).
  std::string current;
  for (;;) {
    const int64_t have = current.empty() ? 0 : std::stoll(current);
    if (have >= index + 1) return;
    const std::string seen = store.compare_set(keys::kEpochCount, current, std::to_string(index + 1));
    if (seen == std::to_string(index + 1)) return;
    current = seen;
  }
}

void publish_event(rendezvous::Store& store, const EventRecord& r) {
  // Claim an index, write the record, then make it visible: readers read
  // records below the count of written ones (telemetry/events).
  const int64_t index = store.add(keys::kEventClaims, 1) - 1;
  store.set(keys::event(index), to_json(r));
  store.add(keys::kEventCount, 1);
}

}  // namespace cohort::telemetry
