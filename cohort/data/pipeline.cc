#include "cohort/data/pipeline.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/data/epoch_order.h"

namespace cohort::data {

using Clock = std::chrono::steady_clock;

struct Pipeline::Epoch {
  Cursor cursor;
  EpochOrder order;
  EpochPlan plan;
  uint64_t generation;
};

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Moving average weighting the newest sample by 1/4: steady within a few
// batches, quick to follow a change of phase.
void average(double& avg, bool& have, double sample) {
  avg = have ? 0.75 * avg + 0.25 * sample : sample;
  have = true;
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<const Source> source, PipelineOptions options)
    : source_(std::move(source)), options_(options) {
  COHORT_CHECK_AS(ConfigError, source_ != nullptr) << "pipeline without a source";
  COHORT_CHECK_AS(ConfigError, source_->size() > 0) << "the source holds no samples";
  COHORT_CHECK_AS(ConfigError, options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size)
      << "rank " << options_.rank << " of world size " << options_.world_size;
  COHORT_CHECK_AS(ConfigError, options_.batch_size >= 1) << "batch size " << options_.batch_size;
  COHORT_CHECK_AS(ConfigError, options_.out_of_order_window >= 0) << "out-of-order window " << options_.out_of_order_window;
  COHORT_CHECK_AS(ConfigError, options_.workers >= 0 && options_.max_workers >= 0 && options_.prefetch >= 0)
      << "negative workers, max_workers or prefetch";
  max_workers_ = options_.max_workers > 0 ? options_.max_workers : int(std::max(1u, std::thread::hardware_concurrency()));
  if (options_.workers > 0) max_workers_ = options_.workers;
  workers_ = options_.workers > 0 ? options_.workers : 1;
  depth_ = options_.prefetch > 0 ? options_.prefetch : std::max(2 * workers_, options_.out_of_order_window + 1);
}

Pipeline::~Pipeline() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

Pipeline& Pipeline::map(MapFn fn) {
  std::lock_guard lock(mu_);
  COHORT_CHECK(epoch_ == nullptr) << "map() after start(): add every map before the first epoch";
  maps_.push_back(std::move(fn));
  return *this;
}

void Pipeline::start(int64_t epoch) { start(epoch_start(source_->size(), options_.order, epoch)); }

void Pipeline::start(const Cursor& cursor) {
  cursor.validate();
  COHORT_CHECK_AS(ConfigError, cursor.dataset_size == source_->size() && cursor.order == options_.order)
      << "the cursor was saved for another order (" << cursor.to_string().substr(0, 120) << "...); this pipeline has "
      << source_->size() << " samples, seed " << options_.order.seed << ", shuffle " << options_.order.shuffle
      << ", sharding by " << (options_.order.sharding == Sharding::by_record ? "record" : "file");
  EpochOrder order(source_->file_sizes(), options_.order, cursor.epoch);
  EpochPlan plan(cursor, order.file_starts(), options_.world_size, options_.batch_size);
  {
    std::lock_guard lock(mu_);
    const uint64_t generation = epoch_ ? epoch_->generation + 1 : 0;
    epoch_ = std::make_shared<const Epoch>(Epoch{cursor, std::move(order), std::move(plan), generation});
    next_claim_ = 0;
    ready_.clear();
    ready_bytes_ = 0;
    in_order_ = 0;
    extra_.clear();
    realised_.clear();
    replay_.clear();
    replayed_ = false;
    consumer_running_ = false;
    started_at_ = Clock::now();
    stats_.time_to_first_batch_s = -1;
    if (threads_.empty())
      for (int i = 0; i < max_workers_; ++i) threads_.emplace_back([this] { worker_loop(); });
  }
  work_cv_.notify_all();
}

bool Pipeline::can_claim() const {
  if (!epoch_ || failed_ || next_claim_ >= epoch_->plan.steps() || busy_ >= workers_) return false;
  // A replayed batch the consumer waits for is built whatever the depth and
  // the bound (batches are claimed in order, so those before it are too):
  // otherwise ready batches it must first pass could block it forever.
  if (!replay_.empty() && next_claim_ <= replay_.front()) return true;
  if (next_claim_ >= in_order_ + depth_) return false;
  if (ready_.empty() && inflight_ == 0) return true;  // progress, whatever the bound
  // Until one sample has been built the size of a batch is unknown: build
  // alone. Then the estimate is the larger of batch_size times that sample
  // and the largest batch built.
  const size_t estimate = std::max(max_batch_bytes_, sample_estimate_);
  if (estimate == 0) return false;
  return ready_bytes_ + size_t(inflight_ + 1) * estimate <= options_.memory_bytes;
}

void Pipeline::worker_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || can_claim(); });
    if (stop_) return;
    const std::shared_ptr<const Epoch> epoch = epoch_;
    const int64_t id = next_claim_++;
    ++busy_;
    ++inflight_;
    lock.unlock();
    Ready slot;
    double seconds = 0;
    try {
      slot.batch = build(*epoch, id, seconds);
      slot.bytes = slot.batch->nbytes();
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    --busy_;
    --inflight_;
    if (slot.batch) {
      max_batch_bytes_ = std::max(max_batch_bytes_, std::max<size_t>(slot.bytes, 1));
      average(build_s_, have_build_, seconds);
      stats_.bad_records += slot.batch->bad_records;
    }
    if (epoch == epoch_) {  // else start() moved on: drop it
      ready_bytes_ += slot.bytes;
      stats_.peak_ready_bytes = std::max(stats_.peak_ready_bytes, ready_bytes_);
      ready_.emplace(id, std::move(slot));
      ready_cv_.notify_all();
    }
    // Freed a worker slot and, perhaps, learned the batch size.
    work_cv_.notify_all();
  }
}

std::shared_ptr<Batch> Pipeline::build(const Epoch& e, int64_t id, double& seconds) {
  const auto t0 = Clock::now();
  auto batch = std::make_shared<Batch>();
  batch->epoch = e.cursor.epoch;
  batch->id = id;
  const int rank = options_.rank;
  const int64_t n = e.plan.batch_items(rank, id);
  const uint64_t first = uint64_t(id) * uint64_t(options_.batch_size);
  std::vector<Sample> samples;
  samples.reserve(size_t(n));
  for (uint64_t k = first; k < first + uint64_t(n); ++k) {
    const uint64_t position = e.plan.position(rank, k);
    const uint64_t index = e.order.sample_at(position);
    Sample sample;
    try {
      sample = source_->read(index);
    } catch (const BadRecordError&) {
      if (options_.on_bad_record == OnBadRecord::fail) throw;
      ++batch->bad_records;
      continue;
    }
    for (size_t m = 0; m < maps_.size(); ++m) {
      SampleRng rng(options_.order.seed, e.cursor.epoch, index, uint32_t(m));
      maps_[m](sample, rng);
    }
    batch->indices.push_back(index);
    batch->positions.push_back(position);
    if (samples.empty() && !have_sample_estimate_.load(std::memory_order_relaxed)) {
      std::lock_guard lock(mu_);
      if (sample_estimate_ == 0) {
        sample_estimate_ = std::max<size_t>(sample.features.nbytes(), 1) * size_t(options_.batch_size);
        work_cv_.notify_all();
      }
      have_sample_estimate_ = true;
    }
    samples.push_back(std::move(sample));
  }
  batch->columns = samples.empty() ? empty_columns(e) : collate(samples, source_.get());
  seconds = seconds_since(t0);
  return batch;
}

Features Pipeline::empty_columns(const Epoch& e) {
  // A batch with no samples still has every column, with 0 rows, so that a
  // consumer (a collective over a feature, a tensor of shape [0, ...]) need
  // not special-case it. The shapes come from one mapped sample.
  std::lock_guard lock(template_mu_);
  if (!template_columns_) {
    Sample sample = source_->read(0);
    for (size_t m = 0; m < maps_.size(); ++m) {
      SampleRng rng(options_.order.seed, e.cursor.epoch, 0, uint32_t(m));
      maps_[m](sample, rng);
    }
    Features columns;
    for (const auto& [name, f] : sample.features) {
      if (f.is_bytes()) {
        columns.set(name, Feature::bytes({}));
        continue;
      }
      std::vector<int64_t> shape{0};
      shape.insert(shape.end(), f.shape().begin(), f.shape().end());
      columns.set(name, Feature::zeros(f.dtype(), std::move(shape)));
    }
    template_columns_ = std::move(columns);
  }
  return *template_columns_;
}

void Pipeline::deliver_locked(int64_t id) {
  if (id == in_order_) {
    ++in_order_;
    while (!extra_.empty() && *extra_.begin() == in_order_) {
      extra_.erase(extra_.begin());
      ++in_order_;
    }
  } else {
    extra_.insert(id);
  }
  realised_.push_back(id);
}

std::shared_ptr<const Batch> Pipeline::next() {
  std::unique_lock lock(mu_);
  COHORT_CHECK(epoch_ != nullptr) << "next() before start()";
  if (failed_) std::rethrow_exception(failed_);
  const Epoch& e = *epoch_;
  const int64_t steps = e.plan.steps();
  if (in_order_ + int64_t(extra_.size()) >= steps) return nullptr;

  const auto arrived = Clock::now();
  if (consumer_running_) average(consume_s_, have_consume_, std::chrono::duration<double>(arrived - last_return_).count());

  // Which batch to hand out: the replayed order first, else the oldest
  // undelivered one, or with a window any ready one among the w oldest.
  int64_t id = -1;
  auto choose = [&]() -> bool {
    if (failed_) return true;
    if (!replay_.empty()) {
      id = replay_.front();
      return ready_.count(id) > 0;
    }
    if (options_.out_of_order_window == 0) {
      id = in_order_;
      return ready_.count(id) > 0;
    }
    // The w oldest undelivered are in [in_order_, in_order_ + w + |extra|);
    // ready_ never holds delivered batches.
    const int64_t limit = in_order_ + options_.out_of_order_window + int64_t(extra_.size());
    for (const auto& [ready_id, slot] : ready_) {
      if (ready_id >= limit) break;
      int64_t rank_among_undelivered = ready_id - in_order_ - int64_t(std::distance(extra_.begin(), extra_.lower_bound(ready_id)));
      if (rank_among_undelivered < options_.out_of_order_window) {
        id = ready_id;
        return true;
      }
    }
    return false;
  };
  if (!replay_.empty()) {
    const int64_t want = replay_.front();
    COHORT_CHECK_AS(ConfigError, want >= in_order_ && want < steps && !extra_.count(want))
        << "replay: batch " << want << " is not an undelivered batch of this epoch (0.." << steps - 1 << ")";
    work_cv_.notify_all();  // it may lie past the depth (can_claim)
  }
  if (!choose()) {
    ready_cv_.wait(lock, choose);
  }
  if (failed_) std::rethrow_exception(failed_);
  const double waited = seconds_since(arrived);
  average(wait_s_, have_wait_, waited);
  stats_.wait_s += waited;

  auto node = ready_.extract(id);
  if (!replay_.empty()) replay_.pop_front();
  Ready slot = std::move(node.mapped());
  ready_bytes_ -= slot.bytes;
  deliver_locked(id);
  work_cv_.notify_all();
  if (slot.error) {
    failed_ = slot.error;
    std::rethrow_exception(failed_);
  }
  ++stats_.batches;
  stats_.samples += int64_t(slot.batch->size());
  if (stats_.time_to_first_batch_s < 0) stats_.time_to_first_batch_s = seconds_since(started_at_);
  if (stats_.batches >= next_retune_) {
    retune();
    next_retune_ = next_retune_ < 16 ? next_retune_ * 2 : next_retune_ + 16;
  }
  consumer_running_ = true;
  last_return_ = Clock::now();
  return slot.batch;
}

void Pipeline::retune() {
  if (options_.workers > 0 && options_.prefetch > 0) return;
  if (!have_build_) return;
  AutotuneInputs in;
  in.build_s = build_s_;
  in.consume_s = have_consume_ ? consume_s_ : 0;
  in.wait_s = wait_s_;
  in.workers = workers_;
  in.depth = depth_;
  in.max_workers = max_workers_;
  in.max_depth = int(std::min<size_t>(options_.memory_bytes / std::max<size_t>({max_batch_bytes_, sample_estimate_, 1}), 1 << 20));
  in.window = options_.out_of_order_window;
  in.tune_workers = options_.workers == 0;
  in.tune_depth = options_.prefetch == 0;
  AutotuneDecision d = autotune(in);
  d.at_batch = stats_.batches;
  // The log keeps the first decision and every change, at most
  // kMaxDecisions of them (the oldest changes go first), so a long run does
  // not grow it without bound.
  constexpr size_t kMaxDecisions = 256;
  const bool changed = decisions_.empty() || d.workers != workers_ || d.depth != depth_;
  workers_ = d.workers;
  depth_ = d.depth;
  if (changed) {
    if (decisions_.size() == kMaxDecisions) decisions_.erase(decisions_.begin() + 1);
    decisions_.push_back(std::move(d));
  }
  work_cv_.notify_all();
}

int64_t Pipeline::steps() const {
  std::lock_guard lock(mu_);
  COHORT_CHECK(epoch_ != nullptr) << "steps() before start()";
  return epoch_->plan.steps();
}

int64_t Pipeline::delivered_batches() const {
  std::lock_guard lock(mu_);
  return in_order_ + int64_t(extra_.size());
}

const EpochPlan& Pipeline::plan() const {
  std::lock_guard lock(mu_);
  COHORT_CHECK(epoch_ != nullptr) << "plan() before start()";
  return epoch_->plan;  // the Epoch lives until the next start()
}

int64_t Pipeline::epoch() const {
  std::lock_guard lock(mu_);
  COHORT_CHECK(epoch_ != nullptr) << "epoch() before start()";
  return epoch_->cursor.epoch;
}

RankProgress Pipeline::progress() const {
  std::lock_guard lock(mu_);
  return {in_order_, std::vector<int64_t>(extra_.begin(), extra_.end())};
}

Cursor Pipeline::cursor() const {
  std::lock_guard lock(mu_);
  COHORT_CHECK(epoch_ != nullptr) << "cursor() before start()";
  COHORT_CHECK(options_.out_of_order_window == 0 && !replayed_)
      << "with an out-of-order window or a replay, ranks may have delivered different batches: the cursor needs "
         "every rank's progress (gather_cursor, cursor_sync.h)";
  const std::vector<RankProgress> all(size_t(options_.world_size), RankProgress{in_order_, {}});
  return epoch_->plan.advance(all);
}

std::vector<int64_t> Pipeline::realised_order() const {
  std::lock_guard lock(mu_);
  return realised_;
}

void Pipeline::replay(std::vector<int64_t> order) {
  std::lock_guard lock(mu_);
  replay_.assign(order.begin(), order.end());
  replayed_ = true;
}

PipelineStats Pipeline::stats() const {
  std::lock_guard lock(mu_);
  PipelineStats s = stats_;
  s.workers = workers_;
  s.prefetch = depth_;
  return s;
}

std::vector<AutotuneDecision> Pipeline::autotune_log() const {
  std::lock_guard lock(mu_);
  return decisions_;
}

}  // namespace cohort::data
