// Pipeline: a source's samples, ordered, sharded over ranks, mapped on a
// pool of worker threads, batched and prefetched, exactly once per epoch.
//
//   auto source = std::make_shared<RecordSource>(list_record_files(dir));
//   Pipeline p(source, {.order = {.seed = 7}, .rank = r, .world_size = w, .batch_size = 64});
//   p.map([](Sample& s, SampleRng& rng) { ... decode, augment ... });
//   p.start(epoch);                       // or p.start(cursor) to resume
//   while (auto batch = p.next()) train(*batch);
//   save(p.cursor().to_string());         // at any step, into the checkpoint
//
// Contracts:
// - Order and sharding: epoch_order.h and epoch_plan.h. Every rank runs
//   steps() batches per epoch (the last may be short or empty on some
//   ranks; none is padded), so ranks stay in step without a vote.
// - A rank's batches past the end of its samples are empty: every column
//   present with 0 rows (shapes learned from one mapped sample).
// - Determinism: batch b of a rank holds the same samples, mapped to the
//   same bytes, whatever the worker count, prefetch depth or timing: each
//   sample's random numbers come from SampleRng(seed, epoch, sample index,
//   map number), never from a thread's state.
// - Exactly once: cursor() (or gather_cursor(), cursor_sync.h) after any
//   step names exactly the positions delivered; start(cursor) on any world
//   size delivers each remaining one once.
// - Memory: batches built and not yet taken by next() stay within
//   memory_bytes, each estimated as the larger of the largest batch built so
//   far and batch_size times the first sample built (until that sample
//   exists, one batch is built alone); at least one batch is always
//   allowed, so a batch larger than the bound still flows. Batches the
//   caller holds are the caller's.
// - Out of order: with out_of_order_window = w > 0, next() returns the
//   lowest-numbered ready batch among the w oldest not yet delivered, so one
//   slow batch does not hold up ready ones. The order actually delivered is
//   recorded (realised_order()); replay() makes a later run deliver that
//   order again, and the cursor records exactly which batches were
//   delivered (gather_cursor() merges the ranks'). Building the batches up
//   to a replayed one ignores the memory bound (they must exist to be
//   passed over).
// - Errors: a worker's exception (a BadRecordError under OnBadRecord::fail,
//   a map that throws, batching mismatched samples) is rethrown by next()
//   when its batch is due, and by every later call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cohort/data/autotuner.h"
#include "cohort/data/bad_record.h"
#include "cohort/data/batch.h"
#include "cohort/data/cursor.h"
#include "cohort/data/epoch_plan.h"
#include "cohort/data/philox.h"
#include "cohort/data/source.h"

namespace cohort::data {

struct PipelineOptions {
  OrderOptions order;  // seed, shuffle, sharding
  int rank = 0;
  int world_size = 1;
  int64_t batch_size = 32;
  int workers = 0;      // threads building batches; 0: autotuned in [1, max_workers]
  int max_workers = 0;  // 0: the machine's hardware threads
  int prefetch = 0;     // batches built ahead of the consumer; 0: autotuned
  size_t memory_bytes = size_t(256) << 20;
  int out_of_order_window = 0;
  OnBadRecord on_bad_record = OnBadRecord::fail;
};

// A per-sample transformation. `rng` is the sample's own generator.
using MapFn = std::function<void(Sample& sample, SampleRng& rng)>;

struct PipelineStats {
  int64_t batches = 0;      // delivered, all epochs
  int64_t samples = 0;
  int64_t bad_records = 0;  // skipped under OnBadRecord::skip
  double time_to_first_batch_s = -1;  // from start() to the epoch's first batch
  double wait_s = 0;                  // the consumer's total time waiting in next()
  size_t peak_ready_bytes = 0;        // most bytes of built batches held at once
  int workers = 0;
  int prefetch = 0;
};

class Pipeline {
 public:
  // ConfigError for an empty source, a rank outside [0, world_size), a batch
  // size or window below its minimum.
  Pipeline(std::shared_ptr<const Source> source, PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Adds a map after those already added (map i draws from stream i).
  // Only before the first start().
  Pipeline& map(MapFn fn);

  // Begins `epoch` at its first position.
  void start(int64_t epoch);
  // Continues where `cursor` says (same order required; any world size).
  void start(const Cursor& cursor);

  // The next batch of this rank, or nullptr once the epoch's steps() batches
  // have been delivered.
  std::shared_ptr<const Batch> next();

  int64_t steps() const;
  int64_t delivered_batches() const;
  const EpochPlan& plan() const;
  int64_t epoch() const;
  uint64_t dataset_size() const { return source_->size(); }
  const PipelineOptions& options() const { return options_; }
  const Source& source() const { return *source_; }

  // This rank's delivered batches in the current plan.
  RankProgress progress() const;
  // The cursor after what every rank delivered, assuming all ranks took as
  // many batches as this one (true at a step boundary of a job whose ranks
  // step together). In-order delivery only (no window, no replay): for
  // those, gather_cursor() asks the other ranks.
  Cursor cursor() const;
  // The batches in the order next() delivered them, this epoch.
  std::vector<int64_t> realised_order() const;
  // The next next() calls deliver `order` (batch ids of this rank, as
  // realised_order() reported) before anything else.
  void replay(std::vector<int64_t> order);

  PipelineStats stats() const;
  // The autotuner's first decision and every one that changed the worker
  // count or prefetch depth (at most 256, the oldest changes dropped first).
  std::vector<AutotuneDecision> autotune_log() const;

 private:
  struct Epoch;  // one start(): its order, plan and generation
  struct Ready {
    std::shared_ptr<Batch> batch;
    std::exception_ptr error;
    size_t bytes = 0;
  };

  void worker_loop();
  bool can_claim() const;
  std::shared_ptr<Batch> build(const Epoch& e, int64_t id, double& seconds);
  Features empty_columns(const Epoch& e);
  void retune();
  void deliver_locked(int64_t id);

  std::shared_ptr<const Source> source_;
  PipelineOptions options_;
  std::vector<MapFn> maps_;
  int max_workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers: something to claim, or stop
  std::condition_variable ready_cv_;  // consumer: a batch is ready
  std::vector<std::thread> threads_;
  bool stop_ = false;
  std::shared_ptr<const Epoch> epoch_;
  int64_t next_claim_ = 0;
  int busy_ = 0;
  int inflight_ = 0;  // batches being built, any generation
  std::map<int64_t, Ready> ready_;
  size_t ready_bytes_ = 0;
  size_t max_batch_bytes_ = 0;
  size_t sample_estimate_ = 0;  // batch_size * the first built sample's bytes
  std::atomic<bool> have_sample_estimate_{false};
  int64_t in_order_ = 0;       // batches [0, in_order_) delivered
  std::set<int64_t> extra_;    // delivered batches above in_order_
  std::vector<int64_t> realised_;
  std::deque<int64_t> replay_;
  bool replayed_ = false;  // replay() called since start()
  std::exception_ptr failed_;

  // Autotuning.
  int workers_;
  int depth_;
  double build_s_ = 0, consume_s_ = 0, wait_s_ = 0;  // moving averages
  bool have_build_ = false, have_consume_ = false, have_wait_ = false;
  std::chrono::steady_clock::time_point last_return_{};
  bool consumer_running_ = false;
  int64_t next_retune_ = 1;
  std::vector<AutotuneDecision> decisions_;
  std::mutex template_mu_;  // guards template_columns_ (built once, by a worker)
  std::optional<Features> template_columns_;
  std::chrono::steady_clock::time_point started_at_{};
  PipelineStats stats_;
};

}  // namespace cohort::data
