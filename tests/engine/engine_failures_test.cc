// Failures: mismatches (by name, through the cache, ordered), the stall
// inspector (warning and shutdown), a rank that aborts or unwinds, shutdown
// with ops pending. Every rank must see the error, naming the cause.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/engine/engine_ranks.h"

namespace cohort::testing::engine_failures_test {
namespace {

using engine::Engine;
using engine::Handle;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Redirects stderr (where COHORT_LOG writes) to a file while alive.
class CaptureStderr {
 public:
  CaptureStderr() {
    std::fflush(stderr);
    path_ = ::testing::TempDir() + "engine_stderr_" + std::to_string(::getpid()) + ".txt";
    saved_ = ::dup(2);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  ~CaptureStderr() {
    restore();
    std::remove(path_.c_str());  // the capture is the test's business only: leave nothing in TempDir
  }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

TEST(EngineMismatch, ShapesAndDtypesFailOnEveryRankNamingTheTensor) {
  for (int n : {2, 3}) {
    run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
      const int r = info.rank;
      // "w": rank 1 sends another size; "d": rank 0 another dtype.
      std::vector<float> w(r == 1 ? 50 : 100, 1.0f);
      std::vector<double> d64(10);
      std::vector<float> d32(10);
      Handle hw = e.allreduce_async("w", BufferView{w.data(), w.size(), DType::f32});
      Handle hd = r == 0 ? e.allreduce_async("d", BufferView{d64.data(), 10, DType::f64})
                         : e.allreduce_async("d", BufferView{d32.data(), 10, DType::f32});
      try {
        hw.wait();
        ADD_FAILURE() << "'w' did not fail on rank " << r;
      } catch (const MismatchError& err) {
        const std::string m = err.what();
        EXPECT_TRUE(contains(m, "'w'")) << m;
        EXPECT_TRUE(contains(m, "rank 1 submitted allreduce(50 f32, sum)")) << m;
        EXPECT_TRUE(contains(m, "allreduce(100 f32, sum)")) << m;
      }
      try {
        hd.wait();
        ADD_FAILURE() << "'d' did not fail on rank " << r;
      } catch (const MismatchError& err) {
        const std::string m = err.what();
        EXPECT_TRUE(contains(m, "'d'")) << m;
        EXPECT_TRUE(contains(m, "rank 0 submitted allreduce(10 f64, sum)")) << m;
        EXPECT_TRUE(contains(m, "10 f32")) << m;
      }
      // The engine carries on.
      std::vector<float> ok(4, 1.0f);
      e.allreduce_async("ok", BufferView{ok.data(), 4, DType::f32}).wait();
      EXPECT_EQ(ok[0], float(n));
      EXPECT_EQ(e.stats().mismatches, 2u);
    });
  }
}

TEST(EngineMismatch, ThroughTheCacheAndInShape) {
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(12, 1.0f);
    e.allreduce_async("x", BufferView{a.data(), 12, DType::f32}).wait();  // cached now
    // Rank 1 changes the size: its request goes by name, evicting the slot.
    const size_t count = info.rank == 1 ? 6 : 12;
    Handle h = e.allreduce_async("x", BufferView{a.data(), count, DType::f32});
    EXPECT_TRUE(contains(error_of(h), "ranks disagree on tensor 'x'")) << error_of(h);
    // Same count, different shape.
    std::vector<int64_t> shape = info.rank == 0 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4, 3};
    Handle s = e.allreduce_async("s", BufferView{a.data(), 12, DType::f32}, {.shape = shape});
    const std::string m = error_of(s);
    EXPECT_TRUE(contains(m, "shape [3, 4]") && contains(m, "shape [4, 3]")) << m;
    // Agreeing again works (and is cached afresh).
    e.allreduce_async("x", BufferView{a.data(), 12, DType::f32}).wait();
  });
}

TEST(EngineMismatch, OrderedSubmissionsThatDiverge) {
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(64, 1.0f);
    Handle ok = e.submit_ordered_allreduce(BufferView{a.data(), 8, DType::f32}, BufferView{a.data(), 8, DType::f32});
    const size_t count = info.rank == 0 ? 16 : 32;
    Handle bad = e.submit_ordered_allreduce(BufferView{a.data() + 8, count, DType::f32},
                                            BufferView{a.data() + 8, count, DType::f32});
    ok.wait();
    const std::string m = error_of(bad);
    EXPECT_TRUE(contains(m, "ordered op #1")) << m;
    EXPECT_TRUE(contains(m, "rank 0 submitted allreduce(16 f32, sum)")) << m;
    EXPECT_TRUE(contains(m, "rank 1 submitted allreduce(32 f32, sum)")) << m;
  });
}

TEST(EngineStall, WarningNamesTheMissingRankAndTheOpStillRuns) {
  auto options = engine_test_options();
  options.stall_warning_s = 0.3;
  CaptureStderr capture;
  std::atomic<bool> warned{false};
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    if (info.rank == 0) {
      Handle h = e.allreduce_async("lonely", BufferView{a.data(), 4, DType::f32});
      EXPECT_TRUE(eventually([&] { return e.stats().stall_warnings > 0; })) << "no stall warning";
      warned = true;
      h.wait();
    } else {
      EXPECT_TRUE(eventually([&] { return warned.load(); }));
      e.allreduce_async("lonely", BufferView{a.data(), 4, DType::f32}).wait();
    }
    EXPECT_EQ(a[0], 2.0f);
  }, options);
  const std::string log = capture.text();
  EXPECT_TRUE(contains(log, "tensor 'lonely': missing rank 1 (submitted by rank 0")) << log;
}

TEST(EngineStall, ShutdownFailsEveryRankNamingTheMissingRanks) {
  auto options = engine_test_options();
  options.stall_warning_s = 0.2;
  options.stall_shutdown_s = 0.5;
  CaptureStderr capture;
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    // Each rank waits for an op the other never submits.
    Handle h = e.allreduce_async(info.rank == 0 ? "only0" : "only1", BufferView{a.data(), 4, DType::f32});
    try {
      h.wait();
      ADD_FAILURE() << "no stall shutdown on rank " << info.rank;
    } catch (const TimeoutError& err) {
      const std::string m = err.what();
      EXPECT_TRUE(contains(m, "stall shutdown")) << m;
      EXPECT_TRUE(contains(m, "tensor 'only0': missing rank 1")) << m;
      EXPECT_TRUE(contains(m, "tensor 'only1': missing rank 0")) << m;
    }
    // The engine has stopped: later submissions fail with the same cause.
    EXPECT_TRUE(contains(error_of(e.allreduce_async("later", BufferView{a.data(), 4, DType::f32})), "stall shutdown"));
  }, options);
  EXPECT_TRUE(contains(capture.text(), "stall shutdown"));
}

TEST(EngineFailure, RankThatAbortsMakesTheOthersFailWithItsMessage) {
  auto errors = run_engine_ranks_collect(3, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    if (info.rank == 1) {
      e.allreduce_async("first", BufferView{a.data(), 4, DType::f32}).wait();
      try {
        throw std::runtime_error("disk on fire at step 7");
      } catch (const std::exception& err) {
        e.abort(err.what());
        throw;
      }
    }
    e.allreduce_async("first", BufferView{a.data(), 4, DType::f32}).wait();
    Handle h = e.allreduce_async("second", BufferView{a.data(), 4, DType::f32});
    const std::string m = error_of(h);
    EXPECT_TRUE(contains(m, "rank 1 aborted: disk on fire at step 7")) << "rank " << info.rank << ": " << m;
  });
  ASSERT_TRUE(errors[1]);
  EXPECT_FALSE(errors[0]);
  EXPECT_FALSE(errors[2]);
}

TEST(EngineFailure, EngineDestroyedDuringUnwindingAbortsTheOthers) {
  auto errors = run_engine_ranks_collect(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    if (info.rank == 1) throw std::runtime_error("user code failed");  // ~Engine runs while unwinding
    Handle h = e.allreduce_async("never", BufferView{a.data(), 4, DType::f32});
    const std::string m = error_of(h);
    EXPECT_TRUE(contains(m, "rank 1 aborted: its engine was destroyed during exception unwinding")) << m;
  });
  EXPECT_TRUE(errors[1]);
  EXPECT_FALSE(errors[0]);
}

// A communicator that, once told to, fails its next allgather the way a
// broken link does: it leaves the group (peers waiting on it notice) and
// throws PeerLostError.
class BreakableComm final : public comm::Communicator {
 public:
  explicit BreakableComm(std::unique_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}
  std::atomic<bool> break_next{false};

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "breakable"; }
  void allreduce(BufferView s, BufferView r, const comm::AllreduceOptions& o) override { live().allreduce(s, r, o); }
  void broadcast(BufferView b, int root) override { live().broadcast(b, root); }
  void allgather(BufferView s, BufferView r) override {
    if (break_next) {
      inner_.reset();
      throw PeerLostError("simulated: the link from rank 1 to rank 0 went down", 0);
    }
    live().allgather(s, r);
  }
  void allgatherv(BufferView s, BufferView r, std::span<const size_t> c) override { live().allgatherv(s, r, c); }
  void reduce_scatter(BufferView s, BufferView r, const comm::ReduceScatterOptions& o) override {
    live().reduce_scatter(s, r, o);
  }
  void alltoall(BufferView s, BufferView r) override { live().alltoall(s, r); }
  void alltoallv(BufferView s, std::span<const size_t> sc, BufferView r, std::span<const size_t> rc) override {
    live().alltoallv(s, sc, r, rc);
  }
  void gather(BufferView s, BufferView r, int root) override { live().gather(s, r, root); }
  void scatter(BufferView s, BufferView r, int root) override { live().scatter(s, r, root); }
  void barrier() override { live().barrier(); }
  void send(BufferView b, int dst, uint32_t tag) override { live().send(b, dst, tag); }
  void recv(BufferView b, int src, uint32_t tag) override { live().recv(b, src, tag); }
  std::unique_ptr<comm::Communicator> split(int color, int key) override { return live().split(color, key); }

 private:
  comm::Communicator& live() {
    if (!inner_) throw PeerLostError("the communicator is gone", -1);
    return *inner_;
  }
  std::unique_ptr<comm::Communicator> inner_;
  int rank_ = inner_->rank();
  int size_ = inner_->size();
};

TEST(EngineFailure, CommunicatorFailureOnOneRankReachesTheOthersWithItsText) {
  const int n = 2;
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::atomic<bool> pending{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto shm = std::make_unique<comm::shm::Communicator>(std::make_shared<rendezvous::PrefixStore>("comm", store), r,
                                                             n, engine_comm_options());
        auto comm = std::make_shared<BreakableComm>(std::move(shm));
        Engine e(comm, std::make_shared<rendezvous::PrefixStore>("engine", store), engine_test_options());
        std::vector<float> a(4, 1.0f);
        if (r == 0) {
          Handle h = e.allreduce_async("x", BufferView{a.data(), 4, DType::f32});
          pending = true;
          try {
            h.wait();
            ADD_FAILURE() << "'x' completed";
          } catch (const PeerLostError& err) {
            EXPECT_TRUE(contains(err.what(), "rank 1: simulated: the link from rank 1 to rank 0 went down")) << err.what();
          }
        } else {
          ASSERT_TRUE(eventually([&] { return pending.load(); }));
          comm->break_next = true;
          Handle h = e.allreduce_async("y", BufferView{a.data(), 4, DType::f32});  // runs a cycle
          EXPECT_TRUE(contains(error_of(h), "simulated")) << error_of(h);
        }
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

TEST(EngineFailure, ShutdownFailsOpsPendingElsewhereNamingTheRank) {
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(4, 1.0f);
    e.allreduce_async("both", BufferView{a.data(), 4, DType::f32}).wait();
    if (info.rank == 1) {
      e.shutdown();
      EXPECT_TRUE(contains(error_of(e.allreduce_async("after", BufferView{a.data(), 4, DType::f32})), "shut down"));
      return;
    }
    Handle h = e.allreduce_async("pending", BufferView{a.data(), 4, DType::f32});
    EXPECT_TRUE(contains(error_of(h), "was shut down by rank 1")) << error_of(h);
  });
}

}  // namespace
}  // namespace cohort::testing::engine_failures_test
