// The pipeline end to end, ranks as threads: deterministic map output
// whatever the worker count, every sample exactly once over 1-4 ranks with
// uneven counts, resume mid-epoch at the same and at another world size
// (by record and by file), the out-of-order window with a straggler (its
// realised order, the gathered cursor, replay), the memory bound, bad
// records, and errors from maps.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "cohort/data/cursor_sync.h"
#include "cohort/data/epoch_order.h"
#include "cohort/data/example.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/record_format.h"
#include "cohort/data/record_index.h"
#include "cohort/data/record_source.h"
#include "cohort/data/record_writer.h"
#include "tests/comm/rank_threads.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::pipeline_test {
namespace {

using testing::error_of;

// Sample i: "id" i64 scalar i, "pixels" u8[8] from i. Files as given.
class SyntheticSource final : public Source {
 public:
  explicit SyntheticSource(std::vector<uint64_t> file_sizes) : file_sizes_(std::move(file_sizes)) {
    for (uint64_t s : file_sizes_) n_ += s;
  }
  uint64_t size() const override { return n_; }
  std::vector<uint64_t> file_sizes() const override { return file_sizes_; }
  Sample read(uint64_t index) const override {
    Sample s;
    s.index = index;
    s.features.set("id", Feature::scalar<int64_t>(int64_t(index)));
    std::vector<uint8_t> px(8);
    for (size_t j = 0; j < 8; ++j) px[j] = uint8_t(index * 13 + j * 29);
    s.features.set("pixels", Feature::of(px, {2, 4}));
    return s;
  }

 private:
  std::vector<uint64_t> file_sizes_;
  uint64_t n_ = 0;
};

// An augmentation: pixels to f32 with noise, a random flip, a random label
// offset; every number from the sample's own generator.
void augment(Sample& s, SampleRng& rng) {
  const auto px = s["pixels"].values<uint8_t>();
  Feature f = Feature::zeros(DType::f32, {2, 4});
  auto out = f.values<float>();
  const bool flip = rng.bernoulli(0.5);
  for (size_t i = 0; i < 8; ++i) out[flip ? 7 - i : i] = float(px[i]) / 255.0f + float(rng.normal()) * 0.1f;
  s.features.set("image", std::move(f));
  s.features.set("jitter", Feature::scalar<int64_t>(rng.between(-3, 3)));
  s.features.erase("pixels");
}

// Per sample id: the bytes its features became.
using Delivered = std::map<int64_t, std::string>;

void record(const Batch& b, Delivered& out, int* duplicates = nullptr) {
  const auto ids = b.columns.at("id").values<int64_t>();
  ASSERT_EQ(ids.size(), b.size());
  const auto image = b.columns.at("image").raw();
  const auto jitter = b.columns.at("jitter").values<int64_t>();
  const size_t per = image.size() / std::max<size_t>(b.size(), 1);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(uint64_t(ids[i]), b.indices[i]);
    std::string bytes(reinterpret_cast<const char*>(image.data() + i * per), per);
    bytes += std::to_string(jitter[i]);
    if (!out.emplace(ids[i], bytes).second && duplicates) ++*duplicates;
  }
}

PipelineOptions options(int rank, int world, int64_t batch, Sharding sharding = Sharding::by_record) {
  PipelineOptions o;
  o.order = {.seed = 11, .shuffle = true, .sharding = sharding};
  o.rank = rank;
  o.world_size = world;
  o.batch_size = batch;
  return o;
}

// Runs `world` ranks as threads, each taking `steps` batches (all when
// negative) from `from`; merges what they delivered into `seen`. Returns
// rank 0's cursor (checking every rank computed the same).
Cursor run_ranks(std::shared_ptr<const Source> source, int world, int64_t batch, const Cursor& from, int64_t steps,
                 Delivered& seen, int& duplicates, Sharding sharding = Sharding::by_record, int workers = 2) {
  std::vector<Delivered> got(static_cast<size_t>(world));
  std::vector<Cursor> cursors(static_cast<size_t>(world));
  std::vector<int64_t> batches(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto o = options(r, world, batch, sharding);
        o.workers = workers;
        Pipeline p(source, o);
        p.map(augment);
        p.start(from);
        const int64_t want = steps < 0 ? p.steps() : std::min(steps, p.steps());
        for (int64_t s = 0; s < want; ++s) {
          auto b = p.next();
          if (!b) throw Error("nullptr before steps()");
          record(*b, got[size_t(r)]);
          ++batches[size_t(r)];
        }
        if (steps < 0 && p.next() != nullptr) throw Error("a batch after steps()");
        cursors[size_t(r)] = p.cursor();
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(cursors[size_t(r)], cursors[0]) << "rank " << r;
    EXPECT_EQ(batches[size_t(r)], batches[0]) << "every rank runs the same number of steps";
    for (auto& [id, bytes] : got[size_t(r)])
      if (!seen.emplace(id, bytes).second) ++duplicates;
  }
  return cursors[0];
}

TEST(Pipeline, MapOutputDoesNotDependOnWorkerCount) {
  auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{257});
  std::vector<std::vector<std::string>> runs;
  for (int workers : {1, 2, 4, 0}) {
    auto o = options(0, 1, 16);
    o.workers = workers;
    o.max_workers = 4;
    Pipeline p(source, o);
    p.map(augment);
    p.start(3);
    std::vector<std::string> batches;
    while (auto b = p.next()) {
      std::string bytes;
      for (const auto& [name, f] : b->columns) bytes.append(reinterpret_cast<const char*>(f.raw().data()), f.raw().size());
      batches.push_back(bytes);
    }
    EXPECT_EQ(int64_t(batches.size()), p.steps());
    runs.push_back(batches);
  }
  for (size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[0]) << "run " << i;
}

TEST(Pipeline, EverySampleOnceOverOneToFourRanks) {
  auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{103});
  Delivered reference;
  int duplicates = 0;
  run_ranks(source, 1, 5, epoch_start(103, options(0, 1, 5).order, 1), -1, reference, duplicates);
  ASSERT_EQ(reference.size(), 103u);
  for (int world = 2; world <= 4; ++world) {
    Delivered seen;
    const Cursor end = run_ranks(source, world, 5, epoch_start(103, options(0, 1, 5).order, 1), -1, seen, duplicates);
    EXPECT_EQ(duplicates, 0);
    EXPECT_TRUE(end.epoch_done()) << end.to_string();
    // The same samples, augmented identically, whatever the world size.
    EXPECT_EQ(seen, reference) << world << " ranks";
  }
}

TEST(Pipeline, ResumeMidEpochAtTheSameAndAnotherWorldSize) {
  for (Sharding sharding : {Sharding::by_record, Sharding::by_file}) {
    auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{20, 3, 0, 41, 17, 9, 30});
    const uint64_t n = source->size();
    const OrderOptions order = options(0, 1, 4, sharding).order;
    Delivered reference;
    int duplicates = 0;
    run_ranks(source, 1, 4, epoch_start(n, order, 0), -1, reference, duplicates, sharding);
    for (auto [first, second] : {std::pair{3, 3}, {4, 2}, {2, 3}, {1, 4}}) {
      Delivered seen;
      duplicates = 0;
      const Cursor mid = run_ranks(source, first, 4, epoch_start(n, order, 0), 5, seen, duplicates, sharding);
      // Through text, as a checkpoint would carry it.
      const Cursor restored = Cursor::parse(mid.to_string());
      EXPECT_EQ(restored.delivered(), seen.size());
      const Cursor end = run_ranks(source, second, 4, restored, -1, seen, duplicates, sharding);
      EXPECT_EQ(duplicates, 0) << first << "->" << second;
      EXPECT_TRUE(end.epoch_done());
      EXPECT_EQ(seen, reference) << first << " -> " << second << " ranks";
    }
  }
}

// A source whose reads of chosen samples block until released: a
// deterministic straggler.
class GatedSource final : public Source {
 public:
  GatedSource(uint64_t n, std::set<uint64_t> gated) : inner_({n}), gated_(std::move(gated)) {}
  uint64_t size() const override { return inner_.size(); }
  Sample read(uint64_t index) const override {
    if (gated_.count(index)) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return open_; });
    }
    return inner_.read(index);
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  SyntheticSource inner_;
  std::set<uint64_t> gated_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool open_ = false;
};

TEST(Pipeline, OutOfOrderWindowPassesAStragglerAndResumesExactlyOnce) {
  const uint64_t n = 90;
  const int64_t batch = 5;
  const OrderOptions order = options(0, 1, batch).order;
  // Rank r's batch 0: gate its last sample (the first one tells the
  // pipeline how large batches are, before which it builds one at a time).
  const Cursor start = epoch_start(n, order, 0);
  const EpochPlan plan(start, {0, n}, 2, batch);
  const EpochOrder eo({n}, order, 0);
  std::set<uint64_t> gated;
  for (int r = 0; r < 2; ++r) gated.insert(eo.sample_at(plan.position(r, uint64_t(batch) - 1)));
  auto gated_source = std::make_shared<GatedSource>(n, gated);

  std::vector<std::vector<int64_t>> realised(2);
  std::vector<Cursor> cursors(2);
  std::vector<Delivered> got(2), later(2);
  ::cohort::testing::run_ranks(2, [&](int r, comm::Communicator& comm) {
    auto o = options(r, 2, batch);
    o.workers = 3;
    o.out_of_order_window = 3;
    Pipeline p(gated_source, o);
    p.map(augment);
    p.start(start);
    // Batch 0 is stuck: the window hands out two of the others first.
    for (int i = 0; i < 2; ++i) record(*p.next(), got[size_t(r)]);
    EXPECT_NE(error_of<Error>([&] { p.cursor(); }).find("gather_cursor"), std::string::npos);
    cursors[size_t(r)] = gather_cursor(allgather_over(comm), p);
    comm.barrier();
    if (r == 0) gated_source->open();
    comm.barrier();
    for (int i = 0; i < 2; ++i) record(*p.next(), later[size_t(r)]);
    realised[size_t(r)] = p.realised_order();
  });
  // Which batches pass the straggler is timing: next() takes the lowest
  // *ready* batch among the 3 oldest undelivered, so the first is 1 or 2
  // (window {0, 1, 2}) and the second any other of {1, 2, 3}. Never 0.
  for (int r = 0; r < 2; ++r) {
    const auto& order = realised[size_t(r)];
    ASSERT_EQ(order.size(), 4u);
    EXPECT_TRUE(order[0] == 1 || order[0] == 2) << order[0];
    EXPECT_TRUE(order[1] >= 1 && order[1] <= 3 && order[1] != order[0]) << order[1];
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 4u);
  }
  // While batch 0 was stuck the ranks had delivered batches 1 and 2: the
  // cursor says exactly that, a gap where batch 0 goes.
  EXPECT_EQ(cursors[0], cursors[1]);
  EXPECT_EQ(cursors[0].consumed, 0u) << cursors[0].to_string();
  EXPECT_FALSE(cursors[0].also_consumed.empty()) << cursors[0].to_string();
  Delivered seen = got[0];
  int duplicates = 0;
  for (auto& [id, bytes] : got[1])
    if (!seen.emplace(id, bytes).second) ++duplicates;
  EXPECT_EQ(seen.size(), 4u * uint64_t(batch));
  EXPECT_EQ(cursors[0].delivered(), seen.size());
  // Resume on 3 ranks: the rest, once.
  auto plain = std::make_shared<SyntheticSource>(std::vector<uint64_t>{n});
  const Cursor end = run_ranks(plain, 3, batch, Cursor::parse(cursors[0].to_string()), -1, seen, duplicates);
  EXPECT_EQ(duplicates, 0);
  EXPECT_TRUE(end.epoch_done());
  EXPECT_EQ(seen.size(), n);

  // Replay: rank 0's realised order delivers the same batches again, even
  // with the gate open and one worker.
  auto o = options(0, 2, batch);
  o.workers = 1;
  o.out_of_order_window = 3;
  Pipeline again(gated_source, o);
  again.map(augment);
  again.start(start);
  again.replay(realised[0]);
  Delivered replayed;
  for (size_t i = 0; i < realised[0].size(); ++i) {
    auto b = again.next();
    EXPECT_EQ(b->id, realised[0][i]);
    record(*b, replayed);
  }
  EXPECT_EQ(again.realised_order(), realised[0]);
  Delivered original = got[0];
  original.insert(later[0].begin(), later[0].end());
  EXPECT_EQ(replayed, original);
}

TEST(Pipeline, HeldBatchesStayUnderTheMemoryBoundWithASlowConsumer) {
  // 16 samples of 64 KiB per batch: 1 MiB batches; a bound of 3.5 MiB.
  class Big final : public Source {
   public:
    uint64_t size() const override { return 16 * 40; }
    Sample read(uint64_t index) const override {
      Sample s;
      s.index = index;
      s.features.set("blob", Feature::zeros(DType::u8, {64 << 10}));
      return s;
    }
  };
  for (int workers : {0, 4}) {
    PipelineOptions o = options(0, 1, 16);
    o.workers = workers;
    o.max_workers = 4;
    o.prefetch = workers ? 16 : 0;  // a depth the bound must override
    o.memory_bytes = size_t(3.5 * (1 << 20));
    Pipeline p(std::make_shared<Big>(), o);
    p.start(0);
    int64_t batches = 0;
    while (auto b = p.next()) {
      ++batches;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(batches, 40);
    EXPECT_LE(p.stats().peak_ready_bytes, o.memory_bytes) << workers << " workers";
    EXPECT_GE(p.stats().peak_ready_bytes, size_t(1) << 20);
  }
}

TEST(Pipeline, BadRecordsFailOrAreSkippedAndCounted) {
  testing::TempDir dir;
  const std::string path = dir.file("d.tfrecord");
  {
    RecordWriter w(path);
    for (int i = 0; i < 30; ++i) {
      Features f;
      f.set("id", Feature::scalar<int64_t>(i));
      w.write(build_example(f));
    }
    w.close();
  }
  auto bytes = testing::slurp(path);
  const RecordIndex index = build_index(open_file(path));
  bytes[index.offset(17) + 14] ^= 0x40;
  testing::spit(path, bytes);
  auto source = std::make_shared<RecordSource>(std::vector<std::string>{path});
  {
    Pipeline p(source, options(0, 1, 4));
    p.start(0);
    const std::string error = error_of<CorruptRecordError>([&] {
      while (p.next()) {
      }
    });
    EXPECT_NE(error.find(path + ": corrupt record at byte offset " + std::to_string(index.offset(17))), std::string::npos)
        << error;
    // The pipeline stays failed.
    EXPECT_NE(error_of<CorruptRecordError>([&] { p.next(); }), "no error");
  }
  auto o = options(0, 1, 4);
  o.on_bad_record = OnBadRecord::skip;
  Pipeline p(source, o);
  p.start(0);
  std::set<int64_t> ids;
  while (auto b = p.next())
    for (int64_t id : b->columns.at("id").values<int64_t>()) ids.insert(id);
  EXPECT_EQ(ids.size(), 29u);
  EXPECT_EQ(ids.count(17), 0u);
  EXPECT_EQ(p.stats().bad_records, 1);
}

TEST(Pipeline, MapErrorsReachTheConsumerAndBadCursorsAreRefused) {
  auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{40});
  Pipeline p(source, options(0, 1, 4));
  p.map([](Sample& s, SampleRng&) {
    if (s.index == 7) throw ConfigError("sample 7 is not an image");
  });
  p.start(0);
  EXPECT_NE(error_of<ConfigError>([&] {
              while (p.next()) {
              }
            }).find("sample 7 is not an image"),
            std::string::npos);
  Pipeline q(source, options(0, 1, 4));
  Cursor other = epoch_start(40, {.seed = 12}, 0);
  EXPECT_NE(error_of<ConfigError>([&] { q.start(other); }).find("another order"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] { Pipeline(source, options(2, 2, 4)); }).find("rank 2 of world size 2"),
            std::string::npos);
}

TEST(Autotune, DecisionsFollowTheMeasuredRates) {
  // The consumer waits: more workers, up to what keeps up.
  AutotuneDecision d = autotune({.build_s = 0.010, .consume_s = 0.002, .wait_s = 0.008, .workers = 1, .depth = 2,
                                 .max_workers = 8, .max_depth = 100});
  EXPECT_EQ(d.workers, 5);
  EXPECT_EQ(d.depth, 10);
  EXPECT_NE(d.reason.find("waited"), std::string::npos);
  // Capped by the machine and the memory bound.
  d = autotune({.build_s = 0.010, .consume_s = 0.001, .wait_s = 0.009, .workers = 2, .depth = 4, .max_workers = 3,
                .max_depth = 4});
  EXPECT_EQ(d.workers, 3);
  EXPECT_EQ(d.depth, 4);
  EXPECT_NE(d.reason.find("memory bound"), std::string::npos);
  // The consumer is the slow side: one worker fewer per decision.
  d = autotune({.build_s = 0.002, .consume_s = 0.010, .wait_s = 0, .workers = 4, .depth = 8, .max_workers = 8,
                .max_depth = 100});
  EXPECT_EQ(d.workers, 3);
  // Fixed settings stay.
  d = autotune({.build_s = 0.010, .consume_s = 0.001, .wait_s = 0.01, .workers = 2, .depth = 5, .max_workers = 8,
                .max_depth = 100, .window = 0, .tune_workers = false, .tune_depth = false});
  EXPECT_EQ(d.workers, 2);
  EXPECT_EQ(d.depth, 5);
}

// The retune points (pipeline.cc): batches 1, 2, 4, 8, 16, then every 16.
bool is_retune_point(int64_t batch) {
  for (int64_t at = 1; at <= batch; at = at < 16 ? at * 2 : at + 16)
    if (at == batch) return true;
  return false;
}

TEST(Autotune, ThePipelineLogsItsDecisions) {
  auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{2000});
  auto o = options(0, 1, 8);
  o.max_workers = 2;
  Pipeline p(source, o);
  p.map(augment);
  p.start(0);
  while (p.next()) {
  }
  const auto log = p.autotune_log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front().at_batch, 1);
  // Each entry is the rule applied to what the pipeline measured then and to
  // the settings the entry before it left (the first: 1 worker, depth 2).
  int workers = 1, depth = 2;
  int64_t at = 0;
  for (const auto& d : log) {
    SCOPED_TRACE("decision at batch " + std::to_string(d.at_batch));
    EXPECT_GT(d.at_batch, at);
    EXPECT_TRUE(is_retune_point(d.at_batch));
    at = d.at_batch;
    EXPECT_EQ(d.inputs.workers, workers);
    EXPECT_EQ(d.inputs.depth, depth);
    EXPECT_EQ(d.inputs.max_workers, 2);
    EXPECT_TRUE(d.inputs.tune_workers && d.inputs.tune_depth);
    EXPECT_GT(d.inputs.build_s, 0);
    const AutotuneDecision again = autotune(d.inputs);
    EXPECT_EQ(d.workers, again.workers);
    EXPECT_EQ(d.depth, again.depth);
    EXPECT_EQ(d.reason, again.reason);
    EXPECT_TRUE(d.workers != workers || d.depth != depth || &d == &log.front()) << "an entry that changed nothing";
    workers = d.workers;
    depth = d.depth;
  }
  // The pipeline runs with the last decision.
  EXPECT_EQ(p.stats().workers, workers);
  EXPECT_EQ(p.stats().prefetch, depth);
}

TEST(Autotune, ASlowMapGetsEveryWorkerAtTheFirstDecision) {
  // The rule's known answer at the first decision (batch 1): the consumer's
  // own time per batch is not known yet (0: one microsecond, the floor) and
  // it waited for that batch, so it is starved and needs ceil(build / 1 us)
  // workers: every worker allowed, and a queue slot for each being built.
  // The map's sleep only bounds the build time from below (4 samples of at
  // least 1 ms each), far above the 3 us that 3 workers need.
  auto source = std::make_shared<SyntheticSource>(std::vector<uint64_t>{24});
  auto o = options(0, 1, 4);
  o.max_workers = 3;
  Pipeline p(source, o);
  p.map([](Sample&, SampleRng&) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  p.start(0);
  ASSERT_NE(p.next(), nullptr);
  const auto log = p.autotune_log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].at_batch, 1);
  EXPECT_EQ(log[0].inputs.consume_s, 0);
  EXPECT_GE(log[0].inputs.build_s, 0.004);
  EXPECT_GT(log[0].inputs.wait_s, 0);
  EXPECT_EQ(log[0].workers, 3);
  EXPECT_EQ(log[0].depth, 6);
  EXPECT_NE(log[0].reason.find("waited"), std::string::npos) << log[0].reason;
  EXPECT_EQ(p.stats().workers, 3);
  EXPECT_EQ(p.stats().prefetch, 6);
  while (p.next()) {
  }
}

}  // namespace
}  // namespace cohort::data::pipeline_test
