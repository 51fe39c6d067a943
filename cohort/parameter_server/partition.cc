#include "cohort/parameter_server/partition.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"

namespace cohort::ps {

Partition::Partition(PartitionConfig config) : config_(std::move(config)), workers_(config_.num_workers) {
  COHORT_CHECK_AS(ConfigError, config_.num_workers >= 1) << "a partition needs at least one worker";
}

// ------------------------------------------------------------------ shards

void Partition::declare(const ShardInfo& info, const VariableSpec& spec, std::span<const std::byte> initial) {
  const uint64_t key = shard_key(info.variable, info.index);
  if (auto it = shards_.find(key); it != shards_.end()) {
    const Shard& s = it->second;
    COHORT_CHECK_AS(MismatchError, s.spec.name == spec.name && s.spec.rows == spec.rows && s.spec.cols == spec.cols &&
                                       s.spec.dtype == spec.dtype && s.info.row_begin == info.row_begin &&
                                       s.info.row_end == info.row_end)
        << "shard " << info.index << " of variable " << info.variable << " was declared as '" << s.spec.name
        << "' " << s.spec.rows << "x" << s.spec.cols << " " << dtype_name(s.spec.dtype) << " rows ["
        << s.info.row_begin << ", " << s.info.row_end << ") and now as '" << spec.name << "' " << spec.rows << "x"
        << spec.cols << " " << dtype_name(spec.dtype) << " rows [" << info.row_begin << ", " << info.row_end
        << "): every worker must declare the same variables in the same order";
    return;
  }
  COHORT_CHECK_AS(ConfigError, !(spec.sparse && config_.optimizer.rule == UpdateRule::sum))
      << "variable '" << spec.name << "' is row-sparse, but optimizer=sum (the summation service) serves dense "
      << "variables only: give sparse tables a server-side optimizer (sgd, adam, adagrad)";
  Shard s;
  s.info = info;
  s.spec = spec;
  const size_t bytes = static_cast<size_t>(info.rows() * spec.row_bytes());
  if (spec.init.kind == Initializer::Kind::given || !initial.empty()) {
    COHORT_CHECK_EQ(initial.size(), bytes) << "initial values of '" << spec.name << "' shard " << info.index;
    s.values.assign(initial.begin(), initial.end());
  } else {
    s.values.resize(bytes);
    spec.init.fill(spec.dtype, info.row_begin, info.row_end, spec.cols, s.values.data());
  }
  for (int i = 0; i < slot_count(config_.optimizer); ++i) {
    Bytes slot(bytes);
    const double init = config_.optimizer.rule == UpdateRule::adagrad ? config_.optimizer.initial_accumulator : 0.0;
    with_value_type(spec.dtype, [&](auto zero) {
      using T = decltype(zero);
      std::fill_n(reinterpret_cast<T*>(slot.data()), bytes / sizeof(T), static_cast<T>(init));
    });
    s.slots.push_back(std::move(slot));
  }
  if (config_.replicated && spec.sparse) s.dirty.assign(static_cast<size_t>(info.rows()), false);
  shards_.emplace(key, std::move(s));
  if (config_.replicated) snapshot_due_ = !snapshot_in_flight_;
}

Shard& Partition::shard(uint64_t key) {
  const auto it = shards_.find(key);
  COHORT_CHECK(it != shards_.end()) << "partition " << config_.id << " has no shard " << (key & 0xffffffffu)
                                    << " of variable " << (key >> 32) << " (not declared)";
  return it->second;
}

// ----------------------------------------------------------------- workers

Partition::Hello Partition::hello(uint32_t worker, uint32_t incarnation) {
  COHORT_CHECK(worker < workers_.size()) << "worker " << worker << " of " << workers_.size();
  WorkerState& w = workers_[worker];
  if (w.incarnation != 0 && w.incarnation != incarnation) {
    // A replacement: the old incarnation is gone, whatever it had not
    // committed with it.
    drop_uncommitted(w);
    w.live = false;
    w.joined = false;
    advance();
  }
  w.incarnation = incarnation;
  w.departed = false;
  return {visible_, w.clock};
}

void Partition::join(uint32_t worker, uint32_t incarnation, int64_t clock) {
  WorkerState& w = workers_.at(worker);
  if (w.incarnation == 0) w.incarnation = incarnation;
  if (w.incarnation != incarnation) return;
  w.live = true;
  w.departed = false;
  w.joined = any_joined_ = true;
  w.clock = std::max(w.clock, clock);
  advance();
}

void Partition::depart(uint32_t worker, uint32_t incarnation) {
  WorkerState& w = workers_.at(worker);
  if (!current(worker, incarnation)) return;
  drop_uncommitted(w);
  w.live = false;
  w.departed = true;
  advance();
}

void Partition::declare_dead(uint32_t worker) {
  WorkerState& w = workers_.at(worker);
  if (!w.live) return;
  drop_uncommitted(w);
  w.live = false;
  advance();
}

bool Partition::current(uint32_t worker, uint32_t incarnation) const {
  if (worker >= workers_.size()) return false;
  const WorkerState& w = workers_[worker];
  return w.incarnation == 0 || w.incarnation == incarnation;
}

bool Partition::accepts(uint32_t worker, uint32_t incarnation) const {
  if (!current(worker, incarnation)) return false;
  const WorkerState& w = workers_[worker];
  return w.live || !w.joined;
}

void Partition::note_read(int64_t clock) {
  const int64_t slowest = slowest_clock();
  if (slowest != std::numeric_limits<int64_t>::max())
    counters_.max_staleness = std::max(counters_.max_staleness, clock - slowest);
}

bool Partition::live(uint32_t worker) const { return worker < workers_.size() && workers_[worker].live; }

int Partition::live_workers() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](const auto& w) { return w.live; }));
}

bool Partition::all_gone() const { return any_joined_ && live_workers() == 0; }

void Partition::drop_uncommitted(WorkerState& w) {
  for (auto it = w.staged.begin(); it != w.staged.end();) {
    if (!it->second.committed) {
      ++counters_.discarded_steps;
      it = w.staged.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t Partition::slowest_clock() const {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const auto& w : workers_)
    if (w.live) slowest = std::min(slowest, w.clock);
  return slowest;
}

int64_t Partition::settled(uint32_t worker) const {
  const WorkerState& w = workers_.at(worker);
  return synchronous() ? std::min(w.clock, visible_) : w.clock;
}

// ------------------------------------------------------------------- steps

Partition::StagedStep* Partition::staging(uint32_t worker, int64_t step) {
  WorkerState& w = workers_.at(worker);
  if (step < w.clock || (synchronous() && step < applied_)) {
    ++counters_.stale_ignored;
    return nullptr;
  }
  return &w.staged[step];
}

bool Partition::stage_dense(uint32_t worker, int64_t step, uint64_t key, std::span<const std::byte> grad) {
  Shard& s = shard(key);
  COHORT_CHECK_EQ(grad.size(), s.values.size()) << "gradient of '" << s.spec.name << "' shard " << s.info.index;
  StagedStep* staged = staging(worker, step);
  if (!staged) return false;
  StagedShard& part = staged->shards[key];
  part = StagedShard{};
  part.dense.assign(grad.begin(), grad.end());
  return true;
}

bool Partition::stage_rows(uint32_t worker, int64_t step, uint64_t key, std::span<const int64_t> rows,
                           std::span<const std::byte> grad) {
  Shard& s = shard(key);
  COHORT_CHECK_EQ(grad.size(), rows.size() * static_cast<size_t>(s.row_bytes()))
      << "row gradient of '" << s.spec.name << "' shard " << s.info.index << " (" << rows.size() << " rows)";
  for (size_t i = 0; i < rows.size(); ++i) {
    COHORT_CHECK(rows[i] >= 0 && rows[i] < s.info.rows())
        << "row " << rows[i] << " outside '" << s.spec.name << "' shard " << s.info.index << " (" << s.info.rows()
        << " rows)";
    COHORT_CHECK(i == 0 || rows[i - 1] < rows[i]) << "pushed rows must be sorted and distinct (deduplicate the batch)";
  }
  StagedStep* staged = staging(worker, step);
  if (!staged) return false;
  StagedShard& part = staged->shards[key];
  part = StagedShard{};
  part.sparse = true;
  part.rows.assign(rows.begin(), rows.end());
  part.row_values.assign(grad.begin(), grad.end());
  return true;
}

void Partition::commit(uint32_t worker, int64_t step) {
  WorkerState& w = workers_.at(worker);
  if (step < w.clock) {
    ++counters_.stale_ignored;
    return;
  }
  w.clock = step + 1;
  if (synchronous()) {
    if (step < applied_) {
      // Its step was applied without it (backup workers, or after it was
      // presumed dead): too late, dropped.
      w.staged.erase(step);
      ++counters_.late_dropped;
    } else {
      w.staged[step].committed = true;
    }
  } else {
    auto it = w.staged.find(step);
    StagedStep empty;
    apply_commit(worker, it == w.staged.end() ? empty : it->second);
    w.staged.erase(w.staged.begin(), w.staged.upper_bound(step));
  }
  advance();
}

bool Partition::step_complete() const {
  const int64_t v = applied_;
  int live = 0, contributors = 0;
  bool all_live_past = true;
  for (const auto& w : workers_) {
    if (w.live) {
      ++live;
      if (w.clock <= v) all_live_past = false;
    }
    const auto it = w.staged.find(v);
    if (it != w.staged.end() && it->second.committed) ++contributors;
  }
  if (live == 0) return false;
  if (all_live_past) return true;
  return config_.backup_workers > 0 && contributors >= std::max(1, live - config_.backup_workers);
}

void Partition::advance() {
  if (!synchronous()) return;
  while (step_complete()) apply_step(applied_);
}

void Partition::apply_step(int64_t step) {
  std::vector<StagedStep*> contributors;
  for (auto& w : workers_) {
    const auto it = w.staged.find(step);
    if (it != w.staged.end() && it->second.committed) contributors.push_back(&it->second);
  }
  if (!contributors.empty()) {
    for (auto& [key, shard] : shards_) {
      std::vector<const StagedShard*> parts;
      for (StagedStep* c : contributors)
        if (auto it = c->shards.find(key); it != c->shards.end()) parts.push_back(&it->second);
      with_value_type(shard.spec.dtype, [&](auto zero) {
        apply_to_shard<decltype(zero)>(shard, parts, static_cast<double>(contributors.size()));
      });
    }
    ++counters_.steps_applied;
  }
  ++applied_;
  for (auto& w : workers_) w.staged.erase(w.staged.begin(), w.staged.lower_bound(applied_));
  applied_update();
}

void Partition::apply_commit(uint32_t worker, StagedStep& staged) {
  for (auto& [key, shard] : shards_) {
    std::vector<const StagedShard*> parts;
    if (auto it = staged.shards.find(key); it != staged.shards.end()) parts.push_back(&it->second);
    with_value_type(shard.spec.dtype, [&](auto zero) {
      apply_to_shard<decltype(zero)>(shard, parts, static_cast<double>(config_.num_workers));
    });
  }
  ++counters_.steps_applied;
  ++applied_;
  applied_update();
}

template <typename T>
void Partition::apply_to_shard(Shard& shard, const std::vector<const StagedShard*>& parts, double divisor) {
  ShardTensors<T> tensors{{reinterpret_cast<T*>(shard.values.data()), shard.values.size() / sizeof(T)}, {}};
  for (Bytes& slot : shard.slots) tensors.slots.emplace_back(reinterpret_cast<T*>(slot.data()), slot.size() / sizeof(T));
  const int64_t cols = shard.spec.cols;
  const T div = static_cast<T>(divisor);
  // A dense shard no contributor pushed is not stepped at all, as torch
  // skips a parameter without a gradient. A row-sparse shard no row of which
  // was touched still counts the step: its variable had a gradient (on other
  // shards), and SparseAdam's bias correction counts steps per variable.
  if (parts.empty()) {
    if (shard.spec.sparse) ++shard.updates;
    return;
  }
  const bool any_dense = std::any_of(parts.begin(), parts.end(), [](const StagedShard* p) { return !p->sparse; });
  if (any_dense || !shard.spec.sparse) {
    // Dense: the mean over contributors, a missing part counting as zero.
    std::vector<T> acc(tensors.values.size(), T(0));
    for (const StagedShard* p : parts) {
      if (p->sparse) {
        const T* v = reinterpret_cast<const T*>(p->row_values.data());
        for (size_t r = 0; r < p->rows.size(); ++r)
          for (int64_t c = 0; c < cols; ++c) acc[p->rows[r] * cols + c] += v[r * cols + c];
      } else {
        const T* g = reinterpret_cast<const T*>(p->dense.data());
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += g[i];
      }
    }
    for (T& a : acc) a /= div;
    ++shard.updates;
    apply_dense<T>(config_.optimizer, tensors, acc, shard.updates);
    if (!shard.dirty.empty()) shard.replica_full = false;
    return;
  }
  // Row-sparse: the union of the parts' rows, each row's mean over
  // contributors; rows no one touched keep their values and state.
  std::vector<int64_t> rows;
  for (const StagedShard* p : parts) rows.insert(rows.end(), p->rows.begin(), p->rows.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<T> acc(rows.size() * cols, T(0));
  for (const StagedShard* p : parts) {
    const T* v = reinterpret_cast<const T*>(p->row_values.data());
    size_t at = 0;  // both row lists are sorted: one merge pass
    for (size_t r = 0; r < p->rows.size(); ++r) {
      while (rows[at] < p->rows[r]) ++at;
      for (int64_t c = 0; c < cols; ++c) acc[at * cols + c] += v[r * cols + c];
    }
  }
  for (T& a : acc) a /= div;
  ++shard.updates;
  apply_rows<T>(config_.optimizer, tensors, cols, rows, acc, shard.updates);
  if (!shard.dirty.empty())
    for (int64_t r : rows)
      if (!shard.dirty[r]) {
        shard.dirty[r] = true;
        shard.dirty_rows.push_back(r);
      }
}

void Partition::applied_update() {
  if (pending_commit_ && *pending_commit_ == applied_) take_commit();
  if (config_.replicated && !snapshot_in_flight_ && applied_ % config_.replicate_every == 0) snapshot_due_ = true;
  if (!synchronous() || (!snapshot_due_ && !snapshot_in_flight_)) visible_ = applied_;
}

void Partition::drop_stale_marker() {
  // Only the state at the commit's version can be kept as it: a keep marker
  // that came due before later updates (the workers ask for the commit
  // before their next step, so not in fit()) is not sent.
  if (marker_due_ != Marker::keep || marker_version_ == applied_) return;
  COHORT_LOG(warn) << "partition " << config_.id << ": the commit at version " << marker_version_
                   << " was not sent to its replica before version " << applied_
                   << "; that commit is kept on the partition's own server only";
  replica_commit_ = std::max(replica_commit_, marker_version_);
  marker_due_ = Marker::none;
}

void Partition::snapshot_sent() {
  snapshot_due_ = false;
  snapshot_in_flight_ = true;
  last_snapshot_version_ = applied_;
  marker_in_flight_ = marker_due_;
  marker_due_ = Marker::none;
}

void Partition::replicated() {
  snapshot_in_flight_ = false;
  if (marker_in_flight_ == Marker::keep) replica_commit_ = std::max(replica_commit_, marker_version_);
  if (marker_in_flight_ == Marker::restore) replica_restore_ = marker_version_;
  marker_in_flight_ = Marker::none;
  // A marker that came due while this snapshot was in flight goes next.
  if (marker_due_ != Marker::none) snapshot_due_ = true;
  if (!synchronous() || !snapshot_due_) visible_ = applied_;
}

void Partition::set_replicated(bool on) {
  config_.replicated = on;
  for (auto& [key, s] : shards_) {
    s.replica_full = false;
    s.dirty_rows.clear();
    if (on && s.spec.sparse)
      s.dirty.assign(static_cast<size_t>(s.info.rows()), false);
    else
      s.dirty.clear();
  }
  snapshot_in_flight_ = false;
  snapshot_due_ = on;
  if (!on) visible_ = applied_;
}

void Partition::request_snapshot() {
  if (!config_.replicated) return;
  for (auto& [key, s] : shards_) s.replica_full = false;
  if (!snapshot_in_flight_) snapshot_due_ = true;
}

void Partition::replica_lost() {
  // The new replica gets a whole snapshot of the current state and none of
  // the commits: a commit or restore the lost one had not acknowledged is
  // kept here only (a second death, of this server, would lose it).
  if (marker_in_flight_ != Marker::none || marker_due_ != Marker::none) {
    const bool restore = marker_in_flight_ == Marker::restore || marker_due_ == Marker::restore;
    COHORT_LOG(warn) << "partition " << config_.id << ": its replica was lost before it acknowledged "
                     << (restore ? "the restore of the commit at version " : "the commit at version ")
                     << marker_version_ << "; that commit is kept on the partition's own server only";
    if (restore)
      replica_restore_ = marker_version_;
    else
      replica_commit_ = std::max(replica_commit_, marker_version_);
  }
  marker_in_flight_ = marker_due_ = Marker::none;
  last_snapshot_version_ = -1;
  snapshot_in_flight_ = false;
  for (auto& [key, s] : shards_) s.replica_full = false;
  snapshot_due_ = config_.replicated;
}

void Partition::reset_progress(int64_t version, const std::map<uint32_t, int64_t>& clocks) {
  applied_ = visible_ = version;
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    const auto it = clocks.find(w);
    workers_[w].clock = it == clocks.end() ? version : it->second;
    workers_[w].staged.clear();
  }
}

// ----------------------------------------------------------------- commits

void Partition::keep_commit(int64_t version) {
  COHORT_CHECK_AS(ConfigError, synchronous() && config_.backup_workers == 0)
      << "partition " << config_.id << ": commits need synchronous steps without backup workers (staleness=0, "
      << "backup_workers=0), got staleness=" << config_.staleness << " backup_workers=" << config_.backup_workers;
  COHORT_CHECK(version >= applied_) << "partition " << config_.id << " was asked to keep a commit at version "
                                    << version << " but is at version " << applied_
                                    << " already (a step was applied before every worker kept the commit)";
  if (!commits_.empty() && commits_.back().version == version && version == applied_) return;  // kept already
  pending_commit_ = version;
  if (version == applied_) take_commit();
}

void Partition::take_commit() {
  pending_commit_.reset();
  drop_commits_from(applied_);
  Commit c{.version = applied_, .shards = {}};
  for (const auto& [key, s] : shards_) c.shards.emplace(key, CommittedShard{s.values, s.slots, s.updates});
  commits_.push_back(std::move(c));
  if (commits_.size() > 2) commits_.pop_front();
  if (!config_.replicated) return;
  marker_due_ = Marker::keep;
  marker_version_ = applied_;
  if (!snapshot_in_flight_) snapshot_due_ = true;
}

void Partition::drop_commits_from(int64_t version) {
  while (!commits_.empty() && commits_.back().version >= version) commits_.pop_back();
}

const Partition::Commit* Partition::find_commit(int64_t version) const {
  for (const Commit& c : commits_)
    if (c.version == version) return &c;
  return nullptr;
}

std::vector<int64_t> Partition::commit_versions() const {
  std::vector<int64_t> out;
  for (const Commit& c : commits_) out.push_back(c.version);
  return out;
}

bool Partition::commit_kept(int64_t version) const {
  return find_commit(version) && (!config_.replicated || replica_commit_ >= version);
}

bool Partition::restore_replicated(int64_t version) const {
  return !config_.replicated || (replica_restore_ == version && marker_due_ == Marker::none &&
                                 marker_in_flight_ == Marker::none);
}

void Partition::restore_commit(int64_t version, std::span<const uint32_t> live, uint64_t timeline) {
  const Commit* c = find_commit(version);
  if (!c) {
    std::string kept;
    for (int64_t v : commit_versions()) kept += (kept.empty() ? "" : ", ") + std::to_string(v);
    COHORT_THROW(Error) << "partition " << config_.id << " holds no commit at version " << version << " (it holds "
                       << (kept.empty() ? "none" : kept) << ")";
  }
  for (auto& [key, s] : shards_) {
    const auto it = c->shards.find(key);
    COHORT_CHECK(it != c->shards.end()) << "partition " << config_.id << ": '" << s.spec.name << "' shard "
                                        << s.info.index << " was declared after commit " << version;
    s.values = it->second.values;
    s.slots = it->second.slots;
    s.updates = it->second.updates;
  }
  drop_commits_from(version + 1);
  pending_commit_.reset();
  // The replica forgets its commits after `version` too: one it had
  // acknowledged there is not on it any more.
  replica_commit_ = std::min(replica_commit_, version);
  set_timeline(timeline);
  applied_ = visible_ = version;
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    WorkerState& ws = workers_[w];
    ws.staged.clear();
    ws.clock = version;
    const bool goes_on = std::find(live.begin(), live.end(), w) != live.end();
    ws.live = goes_on;
    ws.joined = goes_on || ws.joined;
    ws.departed = false;
  }
  any_joined_ = any_joined_ || !live.empty();
  ++counters_.restores;
  if (!config_.replicated) return;
  // The replica takes the restored state whole (as after a load), and
  // forgets its own commits after `version`.
  marker_due_ = Marker::restore;
  marker_version_ = version;
  replica_restore_ = -1;
  last_snapshot_version_ = -1;
  request_snapshot();
}

void Partition::replica_keeps_commit(int64_t version) {
  // A replica is driven only by snapshots: its version is the snapshot's.
  COHORT_CHECK_EQ(applied_, version) << "replica of partition " << config_.id << ": a commit marker";
  take_commit();
}

void Partition::replica_restored(int64_t version) {
  drop_commits_from(version + 1);
  // A replica made after the commit (a new one, after a promotion or a lost
  // replica) lacks it, and the snapshot just applied is its state, whole.
  if (!find_commit(version)) take_commit();
}

// ------------------------------------------------------------------- reads

bool Partition::may_read(int64_t clock) const {
  if (config_.staleness == 0) return visible_ >= clock;
  if (config_.staleness == kAsync) return true;
  return slowest_clock() >= clock - config_.staleness;
}

void Partition::read_dense(uint64_t key, std::byte* out) {
  const Shard& s = shard(key);
  std::memcpy(out, s.values.data(), s.values.size());
  ++counters_.reads;
}

void Partition::read_rows(uint64_t key, std::span<const int64_t> rows, std::byte* out) {
  const Shard& s = shard(key);
  const size_t row_bytes = static_cast<size_t>(s.row_bytes());
  for (size_t i = 0; i < rows.size(); ++i) {
    COHORT_CHECK(rows[i] >= 0 && rows[i] < s.info.rows())
        << "row " << rows[i] << " outside '" << s.spec.name << "' shard " << s.info.index;
    std::memcpy(out + i * row_bytes, s.values.data() + rows[i] * row_bytes, row_bytes);
  }
  ++counters_.reads;
}

}  // namespace cohort::ps
