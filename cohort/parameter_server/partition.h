// Partition: the state of one logical server, and the consistency rules.
//
// A partition holds shards (values, optimizer state), the workers' clocks
// (steps each worker has committed here) and the gradients workers have
// pushed but not yet had applied. It is a plain state machine with no
// sockets, driven by the Server (server.h), so the rules below are tested
// directly (tests/parameter_server/partition_test.cc).
//
// A worker's step on a partition: pushes (staged, replacing an earlier push
// of the same shard and step), then commit(step). Nothing of a step is
// applied before its commit, so a worker that dies mid-step loses exactly
// its uncommitted step, and a push or commit of a step below the worker's
// clock (a retry, a replay after failover) is ignored: a gradient is never
// applied twice.
//   staleness 0: step v applies once every live worker has committed it
//     (or live - backup_workers have; later ones are dropped), with the mean
//     of the committed gradients, summed in worker order so that the result
//     does not depend on arrival order; version counts applied steps. A
//     worker at clock c may read when version >= c.
//   staleness K > 0 or async: each commit applies that worker's gradient
//     divided by the number of workers; version counts applied commits. A
//     worker at clock c may read when the slowest live worker's clock is at
//     least c - K (always, for async).
// Workers die (declare_dead: their uncommitted step is dropped and the live
// set shrinks), leave (depart), or come back as a new incarnation of the
// same index (hello), which joins at a clock it names (join).
//
// Commits (synchronous partitions): an elastic job (cohort/torch/strategy/
// parameter_server.h) redoes the steps since its last commit after a
// membership change, so the servers' state must go back with it.
// keep_commit(v) keeps the state at version v (the two newest are kept) and
// restore_commit(v) rolls back to it. A replicated partition sends both to
// its replica as markers on its snapshots, so that the partition's commits
// survive its server: commit_kept() and restore_replicated() say when the
// replica has acknowledged them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/parameter_server/counters.h"
#include "cohort/parameter_server/layout.h"
#include "cohort/parameter_server/optimizer.h"
#include "cohort/parameter_server/options.h"

namespace cohort::ps {

using Bytes = std::vector<std::byte>;

inline uint64_t shard_key(uint32_t variable, uint32_t index) { return uint64_t(variable) << 32 | index; }

struct Shard {
  ShardInfo info;
  VariableSpec spec;
  Bytes values;
  std::vector<Bytes> slots;  // optimizer state, each like values
  int64_t updates = 0;       // optimizer steps applied (Adam's bias correction)
  // Rows changed since the last replica snapshot (sparse shards only).
  std::vector<bool> dirty;
  std::vector<int64_t> dirty_rows;
  bool replica_full = false;  // the replica holds the whole shard

  int64_t row_bytes() const { return spec.row_bytes(); }
  int64_t bytes() const { return info.rows() * row_bytes(); }
};

struct PartitionConfig {
  int id = 0;
  int num_workers = 1;
  int64_t staleness = 0;
  int backup_workers = 0;
  OptimizerOptions optimizer;
  bool replicated = false;       // a replica of this partition is kept elsewhere
  int64_t replicate_every = 1;
};

class Partition {
 public:
  explicit Partition(PartitionConfig config);

  int id() const { return config_.id; }
  const PartitionConfig& config() const { return config_; }
  bool synchronous() const { return config_.staleness == 0; }

  // --- shards
  // Creates the shard with `initial` values; when it exists, checks that
  // the spec is the same (MismatchError otherwise) and leaves it alone.
  void declare(const ShardInfo& info, const VariableSpec& spec, std::span<const std::byte> initial);
  bool has(uint64_t key) const { return shards_.count(key) != 0; }
  Shard& shard(uint64_t key);  // Error naming the shard when absent
  const std::map<uint64_t, Shard>& shards() const { return shards_; }

  // --- workers
  struct Hello {
    int64_t version = 0;
    int64_t clock = 0;  // the clock recorded for this worker index
  };
  // A worker (index, incarnation) says hello; a new incarnation supersedes
  // the old one (its uncommitted step is discarded) and stays out of the
  // live set until join().
  Hello hello(uint32_t worker, uint32_t incarnation);
  void join(uint32_t worker, uint32_t incarnation, int64_t clock);
  void depart(uint32_t worker, uint32_t incarnation);
  void declare_dead(uint32_t worker);
  // False for an incarnation that a newer one superseded.
  bool current(uint32_t worker, uint32_t incarnation) const;
  // False for a superseded incarnation, and for one declared dead after it
  // had joined (it must come back as a new incarnation).
  bool accepts(uint32_t worker, uint32_t incarnation) const;
  bool live(uint32_t worker) const;
  int live_workers() const;
  bool all_gone() const;  // every worker departed or dead, after at least one joined

  // --- steps
  // False when ignored (a step the worker already committed).
  bool stage_dense(uint32_t worker, int64_t step, uint64_t key, std::span<const std::byte> grad);
  bool stage_rows(uint32_t worker, int64_t step, uint64_t key, std::span<const int64_t> rows,
                  std::span<const std::byte> grad);
  void commit(uint32_t worker, int64_t step);

  // --- reads
  bool may_read(int64_t clock) const;
  // Records the staleness of a read at `clock` served now.
  void note_read(int64_t clock);
  void read_dense(uint64_t key, std::byte* out);
  void read_rows(uint64_t key, std::span<const int64_t> rows, std::byte* out);

  int64_t version() const { return visible_; }
  int64_t applied_version() const { return applied_; }
  // Steps of `worker` below this value will never be needed again: applied
  // (and replicated, when a replica gates visibility) or dropped.
  int64_t settled(uint32_t worker) const;
  int64_t clock(uint32_t worker) const { return workers_.at(worker).clock; }
  int64_t slowest_clock() const;

  // --- replication
  // A snapshot is due when an update made the version a multiple of
  // replicate_every and none is in flight; in synchronous mode the new
  // version becomes visible once replicated() confirms it.
  bool snapshot_due() const { return snapshot_due_; }
  void snapshot_sent();  // the snapshot due was made (make_snapshot)
  void replicated();
  // Replication switched on or off (a promoted partition replicates again
  // when a server is left for it); on resends whole shards.
  void set_replicated(bool on);
  // Asks for a whole snapshot (after a load or a promotion).
  void request_snapshot();
  // The replica server was lost while a snapshot was in flight: the next
  // snapshot goes elsewhere, whole.
  void replica_lost();
  // Installs the whole state from a loaded source (replica snapshot or
  // checkpoint) as this partition's, at `version`, every worker at `clock`.
  void reset_progress(int64_t version, const std::map<uint32_t, int64_t>& clocks);

  // --- commits
  // Keeps the state at applied version `version` (values, optimizer state,
  // update counts) as a commit: now when the partition is at it, else once
  // updates bring it there. A commit at the same version replaces the one
  // kept; the two newest are kept. ConfigError unless synchronous without
  // backup workers (a step could then apply before the last worker kept its
  // commit); Error when the partition is already past `version`.
  void keep_commit(int64_t version);
  // Whether commit `version` is kept here and, when replicated, on the
  // replica too (or the replica was lost: kept here only).
  bool commit_kept(int64_t version) const;
  std::vector<int64_t> commit_versions() const;  // oldest first
  // Back to commit `version` (Error naming the kept ones when it is not):
  // values, optimizer state, version (visible at once), every worker's
  // clock at it and its staged steps dropped, commits after it forgotten.
  // The workers in `live` go on (live, joined); the others are dead until
  // they come back as a new incarnation. A replicated partition sends its
  // replica the restored state, whole (restore_replicated() once acked).
  // Requests of workers' timelines before `timeline` are refused from then
  // on (current_timeline()): replays of the steps rolled back.
  void restore_commit(int64_t version, std::span<const uint32_t> live, uint64_t timeline);
  uint64_t timeline() const { return timeline_; }
  bool current_timeline(uint64_t timeline) const { return timeline >= timeline_; }
  void set_timeline(uint64_t timeline) { timeline_ = std::max(timeline_, timeline); }  // a replica's, from a snapshot
  bool restore_replicated(int64_t version) const;
  // The replica's side of the markers (replica.cc): the snapshot just
  // applied is commit `version`, or the primary restored commit `version`.
  void replica_keeps_commit(int64_t version);
  void replica_restored(int64_t version);

  // The marker the next snapshot carries (replica.cc).
  enum class Marker : uint64_t { none = 0, keep = 1, restore = 2 };
  Marker marker_due() const { return marker_due_; }
  int64_t marker_version() const { return marker_version_; }
  // Whether the replica already holds the state of the snapshot due (a
  // keep marker after a snapshot of the same version): no shard records.
  bool marker_only() const { return marker_due_ == Marker::keep && last_snapshot_version_ == applied_; }
  // Before a snapshot is made: a keep marker of an older version than the
  // state is dropped (kept here only), since the snapshot cannot carry it.
  void drop_stale_marker();

  const PartitionCounters& counters() const { return counters_; }

 private:
  struct CommittedShard {
    Bytes values;
    std::vector<Bytes> slots;
    int64_t updates = 0;
  };
  struct Commit {
    int64_t version = 0;
    std::map<uint64_t, CommittedShard> shards;
  };
  void take_commit();
  void drop_commits_from(int64_t version);  // the commits at `version` and after
  const Commit* find_commit(int64_t version) const;
  struct StagedShard {
    bool sparse = false;
    Bytes dense;
    std::vector<int64_t> rows;
    Bytes row_values;
  };
  struct StagedStep {
    bool committed = false;
    std::map<uint64_t, StagedShard> shards;
  };
  struct WorkerState {
    uint32_t incarnation = 0;
    bool live = true;       // counted in the consistency rules
    bool departed = false;  // left cleanly
    bool joined = false;
    int64_t clock = 0;      // steps committed here
    std::map<int64_t, StagedStep> staged;
  };

  StagedStep* staging(uint32_t worker, int64_t step);
  void drop_uncommitted(WorkerState& w);
  void advance();  // applies what the rules allow
  bool step_complete() const;
  void apply_step(int64_t step);
  void apply_commit(uint32_t worker, StagedStep& staged);
  void applied_update();
  template <typename T>
  void apply_to_shard(Shard& shard, const std::vector<const StagedShard*>& parts, double scale);

  PartitionConfig config_;
  std::map<uint64_t, Shard> shards_;
  std::vector<WorkerState> workers_;
  int64_t applied_ = 0;  // synchronous steps applied, or commits applied
  int64_t visible_ = 0;
  bool snapshot_due_ = false;
  bool snapshot_in_flight_ = false;
  bool any_joined_ = false;
  PartitionCounters counters_;

  std::deque<Commit> commits_;                // oldest first, at most two
  std::optional<int64_t> pending_commit_;     // kept once applied_ reaches it
  Marker marker_due_ = Marker::none;           // for the next snapshot
  Marker marker_in_flight_ = Marker::none;     // on the snapshot not yet acknowledged
  int64_t marker_version_ = -1;                // the version the marker due or in flight names
  int64_t replica_commit_ = -1;                // newest commit the replica acknowledged (or was given up on)
  int64_t replica_restore_ = -1;               // newest restore the replica acknowledged (or given up on)
  int64_t last_snapshot_version_ = -1;         // the version of the last snapshot sent
  uint64_t timeline_ = 0;                      // the newest restore's (refuses older steps)
};

// Dispatches on a shard's element type (f32 or f64).
template <typename F>
decltype(auto) with_value_type(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace cohort::ps
