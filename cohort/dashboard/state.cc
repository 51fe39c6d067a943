#include "cohort/dashboard/state.h"

#include <optional>
#include <sstream>

#include "cohort/rendezvous/membership.h"
#include "cohort/telemetry/keys.h"

namespace cohort::dashboard {
namespace {

int64_t count_at(rendezvous::Store& store, const char* key) {
  const std::optional<std::string> text = telemetry::value_if_set(store, key);
  return text ? std::stoll(*text) : 0;
}

std::string membership_text(const rendezvous::Membership& m) {
  std::ostringstream out;
  out << "epoch " << m.epoch << ": " << m.size() << " rank(s):";
  for (size_t i = 0; i < m.members.size(); ++i) {
    out << " " << i << "=" << rendezvous::member_text(m.members[i]);
    if (i < m.hosts.size() && !m.hosts[i].empty()) out << "@" << m.hosts[i];
  }
  out << " (rank=slot.incarnation)";
  return out.str();
}

}  // namespace

DashboardState::DashboardState(StateOptions options) : options_(options) {
  for (int r = 0; r < options_.size; ++r) track(r);
}

DashboardState::RankTrack& DashboardState::track(int rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) it = ranks_.emplace(rank, RankTrack{.step_ms = Series(options_.points)}).first;
  return it->second;
}

void DashboardState::set_phase(JobPhase phase, std::string failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  phase_ = phase;
  failure_ = std::move(failure);
}

void DashboardState::set_rank_process(int rank, std::string host, int64_t pid) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  RankTrack& t = track(rank);
  t.host = std::move(host);
  t.pid = pid;
  t.ended.clear();  // an elastic replacement runs in the slot again
}

void DashboardState::set_rank_ended(int rank, std::string how) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  track(rank).ended = std::move(how);
}

void DashboardState::add_event(telemetry::EventRecord event) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  add_event_locked(std::move(event));
}

void DashboardState::add_event_locked(telemetry::EventRecord e) {
  ++events_total_;
  events_.push_back(std::move(e));
  if (events_.size() > options_.max_events) events_.erase(events_.begin());
}

void DashboardState::add_sample(const telemetry::RankSample& sample) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  add_sample_locked(sample);
}

void DashboardState::add_sample_locked(const telemetry::RankSample& s) {
  RankTrack& t = track(s.rank);
  if (t.pid == 0 || t.pid != s.pid) {
    // Outside cohortrun the sample is all there is to know about the process.
    if (t.host.empty() || t.pid != s.pid) t.host = s.host;
    t.pid = s.pid;
  }
  const bool same = t.sample && t.sample->unix_time_s == s.unix_time_s && t.sample->step == s.step;
  if (same) return;
  if (s.step > t.last_step && s.window_steps > 0) {
    // The steps since the sample before this one, at this sample's means
    // (a window the poll missed is counted at the next one's).
    const double steps = double(s.step - t.last_step);
    t.time.compute_ms += s.compute_ms * steps;
    t.time.wait_ms += telemetry::wait_ms(s) * steps;
    t.time.input_ms += s.input_ms * steps;
    t.time.checkpoint_ms += s.checkpoint_ms * steps;
    t.time.other_ms += s.other_ms * steps;
    t.step_ms.append(double(s.step), s.step_ms);
  }
  if (s.step < t.last_step) t.step_ms.append(double(s.step), s.step_ms);  // an elastic rollback goes on from there
  t.last_step = s.step;
  t.sample = s;
  if (phase_ == JobPhase::starting && s.step > 0) phase_ = JobPhase::running;
}

void DashboardState::add_epoch(const telemetry::EpochRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  add_epoch_locked(epochs_read_, r);
}

void DashboardState::add_epoch_locked(int64_t index, const telemetry::EpochRecord& r) {
  // Record `index` once: an elastic redo that overwrites a record already
  // read keeps the first (the chart shows the run as it went).
  if (index < epochs_read_) return;
  for (const auto& [name, value] : r.logs)
    metrics_.try_emplace(name, options_.points).first->second.append(double(r.epoch), value);
  last_epoch_ = r;
  epochs_read_ = index + 1;
}

void DashboardState::set_job(const telemetry::JobRecord& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  job_ = job;
  for (int r = 0; r < job.size; ++r) track(r);
}

void DashboardState::set_straggler(const telemetry::StragglerVerdict& verdict) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  straggler_ = verdict;
}

void DashboardState::poll(rendezvous::Store& store) {
  namespace keys = telemetry::keys;
  // Store I/O happens outside the lock: the server's threads keep reading.
  std::optional<telemetry::JobRecord> job;
  if (const auto text = telemetry::value_if_set(store, keys::kJob))
    job = telemetry::job_record_from_json(*text, keys::kJob);
  int size;
  int64_t epochs_from, events_from;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    size = std::max(options_.size, job ? job->size : 0);
    if (!ranks_.empty()) size = std::max(size, ranks_.rbegin()->first + 1);
    epochs_from = epochs_read_;
    events_from = store_events_read_;
  }
  if (job) set_job(*job);
  const std::vector<telemetry::RankSample> samples = telemetry::read_rank_samples(store, size);
  std::optional<telemetry::StragglerVerdict> verdict;
  if (const auto text = telemetry::value_if_set(store, keys::kStraggler))
    verdict = telemetry::straggler_verdict_from_json(*text, keys::kStraggler);
  std::vector<telemetry::EpochRecord> epochs;
  const int64_t epoch_count = count_at(store, keys::kEpochCount);
  for (int64_t i = epochs_from; i < epoch_count; ++i) {
    const std::string key = keys::epoch(i);
    const std::optional<std::string> text = telemetry::value_if_set(store, key);
    if (!text) break;
    epochs.push_back(telemetry::epoch_record_from_json(*text, key));
  }
  std::vector<telemetry::EventRecord> events;
  const int64_t event_count = count_at(store, keys::kEventCount);
  int64_t events_to = events_from;
  for (; events_to < event_count; ++events_to) {
    const std::string key = keys::event(events_to);
    const std::optional<std::string> text = telemetry::value_if_set(store, key);
    if (!text) break;  // claimed, not yet written: the next poll reads it
    events.push_back(telemetry::event_record_from_json(*text, key));
  }
  const int64_t membership = rendezvous::latest_epoch(store);
  std::optional<rendezvous::Membership> members;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (membership >= 0 && membership != membership_epoch_) members.emplace();
  }
  if (members) *members = rendezvous::read_membership(store, membership);

  std::lock_guard<std::mutex> lock(mutex_);
  ++version_;
  for (const auto& s : samples) add_sample_locked(s);
  if (verdict) straggler_ = verdict;
  for (size_t i = 0; i < epochs.size(); ++i) add_epoch_locked(epochs_from + int64_t(i), epochs[i]);
  for (auto& e : events) add_event_locked(std::move(e));
  store_events_read_ = events_to;
  if (members) {
    membership_epoch_ = membership;
    add_event_locked(
        {.unix_time_s = telemetry::unix_now_s(), .kind = "membership", .message = membership_text(*members)});
  }
}

JobPhase DashboardState::phase() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phase_;
}

Status DashboardState::status(double now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Status s{.unix_time_s = now,
           .phase = phase_,
           .failure = failure_,
           .job = job_,
           .straggler = straggler_,
           .epochs = epochs_read_,
           .last_epoch = last_epoch_,
           .events = events_,
           .events_total = events_total_};
  s.ranks.reserve(ranks_.size());
  for (const auto& [rank, t] : ranks_)
    s.ranks.push_back({.rank = rank,
                       .host = t.host,
                       .pid = t.pid,
                       .sample = t.sample,
                       .heartbeat_age_s = t.sample ? now - t.sample->unix_time_s : -1,
                       .ended = t.ended,
                       .time = t.time,
                       .step_ms = t.step_ms.points()});
  for (const auto& [name, series] : metrics_) s.metrics.push_back({name, series.points()});
  return s;
}

std::string DashboardState::status_json(double now) const {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cached_json_.empty() && cached_version_ == version_ && now >= cached_at_ &&
        now - cached_at_ < options_.max_status_age_s)
      return cached_json_;
    version = version_;
  }
  std::string text = to_json(status(now));
  std::lock_guard<std::mutex> lock(mutex_);
  if (version == version_) {
    cached_json_ = text;
    cached_version_ = version;
    cached_at_ = now;
  }
  return text;
}

}  // namespace cohort::dashboard
