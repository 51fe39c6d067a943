// Store semantics, the same for every implementation: MemoryStore,
// FileStore, TcpStore (real sockets to a TcpStoreServer) and PrefixStore over
// a memory and a TCP store.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"
#include "test_util.h"

namespace cohort::rendezvous::store_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One store under test; connect() gives another handle on the same data, as
// another rank would have (a second client, a second FileStore on the
// directory), so that cross-handle wake-ups are tested too.
class Harness {
 public:
  virtual ~Harness() = default;
  virtual std::shared_ptr<Store> connect() = 0;
};

class MemoryHarness : public Harness {
 public:
  std::shared_ptr<Store> connect() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = std::make_shared<MemoryStore>();
};

class FileHarness : public Harness {
 public:
  std::shared_ptr<Store> connect() override { return std::make_shared<FileStore>(dir_.path() + "/store"); }

 private:
  testing::TempDir dir_;
};

class TcpHarness : public Harness {
 public:
  TcpHarness() : server_(TcpStoreServerOptions{.host = "127.0.0.1", .port = 0, .secret = "s3cret"}) {}
  std::shared_ptr<Store> connect() override {
    return std::make_shared<TcpStore>(TcpStoreOptions{
        .host = "127.0.0.1", .port = server_.port(), .secret = "s3cret", .connect_timeout = 10s});
  }

 private:
  TcpStoreServer server_;
};

// Wraps the inner harness' handles in the same prefix.
class PrefixHarness : public Harness {
 public:
  explicit PrefixHarness(std::unique_ptr<Harness> inner) : inner_(std::move(inner)) {}
  std::shared_ptr<Store> connect() override { return std::make_shared<PrefixStore>("group/7", inner_->connect()); }

 private:
  std::unique_ptr<Harness> inner_;
};

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<Harness>()> make;
};

// gtest names the parameter in test listings; without this it dumps bytes.
void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

std::vector<StoreKind> kinds() {
  return {
      {"memory", [] { return std::make_unique<MemoryHarness>(); }},
      {"file", [] { return std::make_unique<FileHarness>(); }},
      {"tcp", [] { return std::make_unique<TcpHarness>(); }},
      {"prefix_memory", [] { return std::make_unique<PrefixHarness>(std::make_unique<MemoryHarness>()); }},
      {"prefix_tcp", [] { return std::make_unique<PrefixHarness>(std::make_unique<TcpHarness>()); }},
  };
}

class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    store_ = harness_->connect();
  }
  std::unique_ptr<Harness> harness_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGet) {
  store_->set("alpha", "one");
  EXPECT_EQ(store_->get("alpha", 1s), "one");
  store_->set("alpha", "two");
  EXPECT_EQ(store_->get("alpha", 1s), "two");
}

TEST_P(StoreTest, ValuesAreArbitraryBytes) {
  const std::string value("\0\x01\xff\n binary \0", 14);
  store_->set("bin", value);
  EXPECT_EQ(store_->get("bin", 1s), value);
  store_->set("empty", "");
  EXPECT_EQ(store_->get("empty", 1s), "");
  const std::string key("k\0\xfe/../x", 8);
  store_->set(key, "odd key");
  EXPECT_EQ(store_->get(key, 1s), "odd key");
  EXPECT_FALSE(store_->check(std::vector<std::string>{"k"}));
}

TEST_P(StoreTest, LargeValue) {
  std::string value(3 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 131 + 7);
  store_->set("big", value);
  EXPECT_EQ(store_->get("big", 10s), value);
}

TEST_P(StoreTest, VisibleThroughAnotherHandle) {
  auto other = harness_->connect();
  store_->set("shared", "v");
  EXPECT_EQ(other->get("shared", 1s), "v");
}

TEST_P(StoreTest, AddCountsFromZero) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -7), -2);
  EXPECT_EQ(store_->add("counter", 0), -2);
  EXPECT_EQ(store_->get("counter", 1s), "-2");
  store_->set("preset", "40");
  EXPECT_EQ(store_->add("preset", 2), 42);
}

TEST_P(StoreTest, AddOnNonIntegerThrows) {
  store_->set("text", "forty-two");
  EXPECT_THROW(store_->add("text", 1), Error);
  EXPECT_EQ(store_->get("text", 1s), "forty-two");  // untouched
  store_->set("huge", "9223372036854775807");
  EXPECT_THROW(store_->add("huge", 1), Error);
  // The store is still usable after the error.
  EXPECT_EQ(store_->add("fine", 1), 1);
}

TEST_P(StoreTest, CompareSet) {
  // Absent key: only an empty `expected` matches.
  EXPECT_EQ(store_->compare_set("cas", "nope", "x"), "");
  EXPECT_FALSE(store_->check(std::vector<std::string>{"cas"}));
  EXPECT_EQ(store_->compare_set("cas", "", "first"), "first");
  EXPECT_EQ(store_->get("cas", 1s), "first");
  // Mismatch returns the current value and changes nothing.
  EXPECT_EQ(store_->compare_set("cas", "wrong", "second"), "first");
  EXPECT_EQ(store_->get("cas", 1s), "first");
  // Match swaps.
  EXPECT_EQ(store_->compare_set("cas", "first", "second"), "second");
  EXPECT_EQ(store_->get("cas", 1s), "second");
}

TEST_P(StoreTest, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 8;
  std::atomic<int> winners{0};
  std::deque<testing::Worker> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = harness_->connect();
      const std::string mine = "rank" + std::to_string(t);
      if (s->compare_set("leader", "", mine) == mine) winners.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreTest, CheckAndRemove) {
  const std::vector<std::string> both{"a", "b"};
  EXPECT_FALSE(store_->check(both));
  store_->set("a", "1");
  EXPECT_FALSE(store_->check(both));
  store_->set("b", "2");
  EXPECT_TRUE(store_->check(both));
  EXPECT_TRUE(store_->check(std::vector<std::string>{}));
  EXPECT_TRUE(store_->remove("a"));
  EXPECT_FALSE(store_->remove("a"));
  EXPECT_FALSE(store_->check(both));
  EXPECT_THROW(store_->get("a", 50ms), TimeoutError);
}

TEST_P(StoreTest, GetBlocksUntilAnotherHandleSets) {
  auto other = harness_->connect();
  testing::Worker setter([&] {
    std::this_thread::sleep_for(150ms);
    other->set("late", "here");
  });
  EXPECT_EQ(store_->get("late", 20s), "here");
  setter.join();
}

TEST_P(StoreTest, WaitBlocksUntilEveryKeyIsSet) {
  auto other = harness_->connect();
  testing::Worker setter([&] {
    other->set("w1", "x");
    std::this_thread::sleep_for(100ms);
    other->add("w2", 1);
    std::this_thread::sleep_for(100ms);
    other->compare_set("w3", "", "z");
  });
  const std::vector<std::string> keys{"w1", "w2", "w3"};
  store_->wait(keys, 20s);
  EXPECT_TRUE(store_->check(keys));
  setter.join();
  store_->wait(std::vector<std::string>{}, 0ms);  // nothing to wait for
}

TEST_P(StoreTest, GetTimesOut) {
  const auto start = Clock::now();
  try {
    store_->get("never", 300ms);
    FAIL() << "get of a key nobody sets returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  // Not absurdly early; no upper bound (the machine may be loaded).
  EXPECT_GE(Clock::now() - start, 250ms);
}

TEST_P(StoreTest, ZeroTimeoutChecksOnce) {
  EXPECT_THROW(store_->get("absent", 0ms), TimeoutError);
  store_->set("present", "p");
  EXPECT_EQ(store_->get("present", 0ms), "p");
}

TEST_P(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->set("here", "1");
  const auto start = Clock::now();
  try {
    store_->wait(std::vector<std::string>{"here", "missing-one"}, 300ms);
    FAIL() << "wait returned with a key missing";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing-one"), std::string::npos) << what;
    EXPECT_EQ(what.find("'here'"), std::string::npos) << what;
  }
  EXPECT_GE(Clock::now() - start, 250ms);
}

TEST_P(StoreTest, DefaultTimeoutApplies) {
  store_->set_default_timeout(200ms);
  EXPECT_EQ(store_->default_timeout(), 200ms);
  EXPECT_THROW(store_->get("nobody"), TimeoutError);
}

TEST_P(StoreTest, ConcurrentAddsAreAtomic) {
  const bool slow = GetParam().name == "file";
  const int threads = slow ? 4 : 8;
  const int per_thread = slow ? 50 : 200;
  std::vector<std::vector<int64_t>> results(threads);
  std::deque<testing::Worker> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto s = harness_->connect();
      for (int i = 0; i < per_thread; ++i) results[t].push_back(s->add("hits", 1));
    });
  }
  for (auto& w : workers) w.join();
  // Every add saw a distinct value: together exactly 1..N.
  std::vector<int64_t> all;
  for (auto& r : results) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(threads * per_thread));
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(store_->get("hits", 1s), std::to_string(threads * per_thread));
}

TEST_P(StoreTest, ManyWaitersWakeOnOneSet) {
  constexpr int kWaiters = 12;
  std::atomic<int> woken{0};
  std::deque<testing::Worker> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      auto s = harness_->connect();
      if (s->get("go", 20s) == "now") woken.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(100ms);
  store_->set("go", "now");
  for (auto& w : waiters) w.join();
  EXPECT_EQ(woken.load(), kWaiters);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(kinds()),
                         [](const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; });

// --- PrefixStore isolation -------------------------------------------------

TEST(PrefixStoreTest, GroupsDoNotSeeEachOther) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore a("a", base);
  PrefixStore b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get("k", 1s), "from a");
  EXPECT_EQ(b.get("k", 1s), "from b");
  EXPECT_EQ(base->get("a/k", 1s), "from a");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 10), 10);
  EXPECT_TRUE(a.remove("k"));
  EXPECT_EQ(b.get("k", 1s), "from b");
  EXPECT_FALSE(a.check(std::vector<std::string>{"k"}));
  EXPECT_TRUE(b.check(std::vector<std::string>{"k"}));
  EXPECT_THROW(a.wait(std::vector<std::string>{"k"}, 50ms), TimeoutError);
  EXPECT_EQ(a.prefix(), "a");
  EXPECT_EQ(a.inner(), base);
}

TEST(PrefixStoreTest, NestedPrefixesCompose) {
  auto base = std::make_shared<MemoryStore>();
  auto outer = std::make_shared<PrefixStore>("world", base);
  PrefixStore inner("split/1", outer);
  inner.set("x", "1");
  EXPECT_EQ(base->get("world/split/1/x", 1s), "1");
}

TEST(PrefixStoreTest, NullInnerIsRejected) { EXPECT_THROW(PrefixStore("p", nullptr), Error); }

}  // namespace
}  // namespace cohort::rendezvous::store_test
