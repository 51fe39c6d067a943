// Parameter servers and workers as threads of this process, talking over
// real ZeroMQ sockets (ipc:// and tcp:// with CURVE): synchronous training
// equals the single-process float64 reference, bounded staleness reaches
// its bound and keeps it, async converges, strangers are refused, a stopped server's
// partition moves to its replica, and an elastic job's commit is restored
// through that move.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/parameter_server/server.h"
#include "cohort/parameter_server/transport.h"
#include "cohort/rendezvous/memory_store.h"
#include "tests/parameter_server/train_loop.h"

namespace cohort::ps::training_test {
namespace {

using testing::Problem;
using testing::ReferenceOptimizer;
using testing::ReferenceResult;

const std::string kSecret = "0123456789abcdef0123456789abcdef";

struct Job {
  std::shared_ptr<rendezvous::Store> store = std::make_shared<rendezvous::MemoryStore>();
  JobOptions options;
  int workers = 2;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::thread> server_threads;
  std::vector<std::string> server_errors;

  Job(JobOptions o, int num_workers, const std::string& transport = "auto") : options(std::move(o)), workers(num_workers) {
    server_errors.resize(options.servers);
    for (int s = 0; s < options.servers; ++s) {
      ServerOptions so = server_options_from_env();
      so.server = s;
      so.num_servers = options.servers;
      so.num_workers = workers;
      so.job = options;
      so.secret = kSecret;
      so.worker_timeout = std::chrono::milliseconds(3000);
      servers.push_back(std::make_unique<Server>(store, so));
    }
    for (int s = 0; s < options.servers; ++s)
      server_threads.emplace_back([this, s] {
        try {
          servers[s]->run();
        } catch (const std::exception& e) {
          server_errors[s] = e.what();
        }
      });
    transport_ = transport;
  }
  ~Job() { finish(); }
  // Stops the servers and returns each one's counters (Server::totals()).
  std::vector<PartitionCounters> finish() {
    for (auto& s : servers) s->stop();
    for (auto& t : server_threads)
      if (t.joinable()) t.join();
    std::vector<PartitionCounters> totals;
    for (auto& s : servers) totals.push_back(s->totals());
    return totals;
  }
  WorkerOptions worker_options(int k) const {
    WorkerOptions o{.worker = k, .num_workers = workers, .num_servers = options.servers, .job = options,
                    .secret = kSecret};
    o.client.transport = transport_;
    // A server that stops answering is given up on quickly here.
    o.client.heartbeat = std::chrono::milliseconds(200);
    o.client.server_timeout = std::chrono::milliseconds(1500);
    return o;
  }
  // Runs every worker's training loop on a thread of its own.
  std::vector<ReferenceResult> train(const Problem& p, int64_t steps, const testing::TrainHooks& hooks = {}) {
    std::vector<ReferenceResult> results(workers);
    std::vector<std::string> errors(workers);
    std::vector<std::thread> threads;
    for (int k = 0; k < workers; ++k)
      threads.emplace_back([&, k] {
        try {
          Worker worker(store, worker_options(k));
          results[k] = testing::train(worker, p, steps, hooks);
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int k = 0; k < workers; ++k) EXPECT_EQ(errors[k], "") << "worker " << k;
    return results;
  }
  std::string transport_;
};

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, tol) << what;
}

ReferenceResult sync_reference(const Problem& p, const ReferenceOptimizer& opt, int64_t steps, int workers) {
  return testing::reference_run(p, opt, steps, [&](int64_t) {
    std::vector<int> all(workers);
    for (int k = 0; k < workers; ++k) all[k] = k;
    return all;
  });
}

struct SyncCase {
  const char* name;
  UpdateRule rule;
  int servers, workers;
  const char* transport;
};

class SynchronousTraining : public ::testing::TestWithParam<SyncCase> {};

TEST_P(SynchronousTraining, EqualsSingleProcessFloat64) {
  const SyncCase c = GetParam();
  JobOptions o;
  o.servers = c.servers;
  o.optimizer = {.rule = c.rule, .lr = c.rule == UpdateRule::sgd ? 0.2 : 0.05, .momentum = 0.5};
  o.partition.num_shards = 2;  // every variable split, across servers
  Job job(o, c.workers, c.transport);
  const Problem p;
  const int64_t steps = 12;
  const auto results = job.train(p, steps);
  ReferenceOptimizer ref{.rule = update_rule_name(c.rule), .lr = o.optimizer.lr, .momentum = 0.5};
  const ReferenceResult expected = sync_reference(p, ref, steps, c.workers);
  for (int k = 0; k < c.workers; ++k) {
    expect_near(results[k].w, expected.w, 1e-12, "w of worker " + std::to_string(k));
    expect_near(results[k].emb, expected.emb, 1e-12, "emb of worker " + std::to_string(k));
  }
  // Training moved the parameters (the comparison is not of two starts).
  double moved = 0;
  const auto w0 = testing::initial_w(p);
  for (size_t i = 0; i < w0.size(); ++i) moved += std::abs(expected.w[i] - w0[i]);
  EXPECT_GT(moved, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Rules, SynchronousTraining,
                         ::testing::Values(SyncCase{"sgd_ipc", UpdateRule::sgd, 2, 3, "auto"},
                                           SyncCase{"adam_ipc", UpdateRule::adam, 1, 2, "auto"},
                                           SyncCase{"adagrad_tcp", UpdateRule::adagrad, 2, 2, "tcp"},
                                           SyncCase{"adam_tcp", UpdateRule::adam, 3, 2, "tcp"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Staleness as options.h defines it and the partitions count it
// (counters.h's max_staleness: the reader's clock minus the slowest live
// worker's, at each read served). Worker 1 holds its first commit until
// worker 0 has pulled at clock K: that read is served while the slowest
// clock is 0, so the bound is reached exactly; worker 0's next read (clock
// K + 1) must then wait for worker 1, and does not come while worker 1
// waits (a bound broken by one lets it through, and the counter shows K + 1).
TEST(Staleness, BoundedStalenessReachesKAndNeverExceedsIt) {
  for (int64_t k : {0, 1, 3}) {
    SCOPED_TRACE("staleness=" + std::to_string(k));
    JobOptions o;
    o.servers = 2;
    o.partition.num_shards = 2;  // partitions on both servers, each with its counters
    o.staleness = k;
    Job job(o, 2);
    const Problem p;
    std::mutex mutex;
    std::condition_variable changed;
    int64_t fast_pulled = -1;     // the last step worker 0 pulled for
    int64_t slow_committed = -1;  // the last step worker 1 committed
    int64_t slowest_at_kth_read = -1;
    bool reached_k = false, fast_went_past = false;
    testing::TrainHooks fast, slow;
    fast.after_pull = [&](int64_t s) {
      std::lock_guard lock(mutex);
      fast_pulled = s;
      if (s == k) slowest_at_kth_read = slow_committed + 1;  // worker 1's clock
      changed.notify_all();
    };
    slow.before_commit = [&](int64_t s) {
      std::unique_lock lock(mutex);
      if (s == 0) {
        // A bound stricter than K never lets worker 0 get there: a failure
        // after a minute, not a hang.
        reached_k = changed.wait_for(lock, std::chrono::seconds(60), [&] { return fast_pulled >= k; });
        // Only a broken bound ends this wait early; a working one lets it
        // time out, so its length only decides how soon a broken one shows.
        fast_went_past = changed.wait_for(lock, std::chrono::milliseconds(300), [&] { return fast_pulled > k; });
      }
      slow_committed = s;
    };
    const int64_t steps = 2 * k + 4;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(2);
    for (int w = 0; w < 2; ++w)
      threads.emplace_back([&, w] {
        try {
          Worker worker(job.store, job.worker_options(w));
          testing::train(worker, p, steps, w == 0 ? fast : slow);
        } catch (const std::exception& e) {
          errors[w] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
    EXPECT_TRUE(reached_k) << "worker 0 never read at clock " << k << " while worker 1 was at clock 0";
    EXPECT_EQ(slowest_at_kth_read, 0) << "worker 0 read at clock " << k << " before worker 1 committed a step";
    EXPECT_FALSE(fast_went_past) << "worker 0 read at clock " << k + 1 << " while worker 1 was at clock 0";
    const std::vector<PartitionCounters> counters = job.finish();
    ASSERT_EQ(counters.size(), 2u);
    for (size_t s = 0; s < counters.size(); ++s) {
      EXPECT_GT(counters[s].reads, 0) << "server " << s;
      EXPECT_EQ(counters[s].max_staleness, k) << "server " << s;
    }
  }
}

// The least-squares optimum of the fixed batches (normal equations).
std::vector<double> optimum(const Problem& p, int workers) {
  const int64_t d = p.dims;
  std::vector<double> result(d * p.outputs);
  for (int64_t o = 0; o < p.outputs; ++o) {
    std::vector<std::vector<double>> m(d, std::vector<double>(d + 1, 0.0));
    for (int k = 0; k < workers; ++k)
      for (int64_t b = 0; b < p.batch; ++b) {
        std::vector<double> a(d);
        for (int64_t i = 0; i < d; ++i) a[i] = testing::uniform(k, 0, b * 64 + i);
        const double y = testing::uniform(k + 100, 0, b * 64 + o);
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t j = 0; j < d; ++j) m[i][j] += a[i] * a[j];
          m[i][d] += a[i] * y;
        }
      }
    for (int64_t i = 0; i < d; ++i) {  // Gauss-Jordan, the matrix is positive definite
      for (int64_t r = 0; r < d; ++r) {
        if (r == i) continue;
        const double f = m[r][i] / m[i][i];
        for (int64_t c = i; c <= d; ++c) m[r][c] -= f * m[i][c];
      }
    }
    for (int64_t i = 0; i < d; ++i) result[i * p.outputs + o] = m[i][d] / m[i][i];
  }
  return result;
}

TEST(Staleness, AsyncConvergesOnAConvexProblem) {
  JobOptions o;
  o.servers = 2;
  o.staleness = kAsync;
  o.optimizer = {.rule = UpdateRule::sgd, .lr = 0.5};
  o.partition.num_shards = 2;
  Job job(o, 2);
  Problem p;
  p.batch = 60;  // well conditioned: A^T A / batch is near I / 3
  testing::TrainHooks hooks;
  hooks.fixed_data = true;
  const auto results = job.train(p, 400, hooks);
  // Both workers minimise the same objective (worker 0's batch), so the
  // fixed point of the asynchronous updates is its optimum exactly.
  const auto best = optimum(p, 1);
  double start = 0, end = 0;
  const auto w0 = testing::initial_w(p);
  for (size_t i = 0; i < best.size(); ++i) {
    start = std::max(start, std::abs(w0[i] - best[i]));
    end = std::max(end, std::abs(results[0].w[i] - best[i]));
  }
  std::cout << "async: distance to the optimum " << start << " -> " << end << "\n";
  EXPECT_GT(start, 0.1);
  EXPECT_LT(end, 1e-6);
}

TEST(Security, AStrangerWithoutTheSecretIsRefused) {
  for (const std::string mode : {"tcp", "ipc", "tcp-plain"}) {
    const std::string transport = mode == "ipc" ? "ipc" : "tcp";
    ::setenv("COHORT_PS_TCP_SECURITY", mode == "tcp-plain" ? "plain" : "curve", 1);
    JobOptions o;
    o.servers = 1;
    Job job(o, 1);
    ::unsetenv("COHORT_PS_TCP_SECURITY");
    ClientOptions c = client_options_from_env();
    c.secret = "not-the-job-secret";
    c.transport = transport;
    c.worker = 0;
    c.incarnation = 42;
    Client stranger(c);
    stranger.add_server(0, ServerAddress::decode(job.store->get(server_address_key(0))));
    Handle h = stranger.request(Target::to_server(0), Message(Op::stats), nullptr, "stats");
    try {
      h.wait();
      FAIL() << mode << ": a stranger was served";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
    }
    // The server counts the refusal when its loop drains the handshake
    // events, which may be just after the stranger heard of it.
    for (int i = 0; i < 1000 && job.servers[0]->refused() < 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GE(job.servers[0]->refused(), 1) << mode;
    // The job's own client is served on the same endpoint.
    ClientOptions good = c;
    good.secret = kSecret;
    Client friendly(good);
    friendly.add_server(0, ServerAddress::decode(job.store->get(server_address_key(0))));
    std::string text;
    friendly.request(Target::to_server(0), Message(Op::stats), [&](Message& r) { text = r.text(0); }, "stats").wait();
    EXPECT_NE(text.find("server=0"), std::string::npos);
  }
}

TEST(Failover, AStoppedServersPartitionMovesToItsReplicaWithNothingLost) {
  JobOptions o;
  o.servers = 3;
  o.replicas = 1;
  o.optimizer = {.rule = UpdateRule::adam, .lr = 0.05};
  o.partition.num_shards = 3;
  Job job(o, 2);
  const Problem p;
  const int64_t steps = 14;
  testing::TrainHooks hooks;
  std::atomic<bool> stopped{false};
  hooks.before_commit = [&](int64_t s) {
    if (s == 6 && !stopped.exchange(true)) job.servers[1]->stop();
  };
  const auto results = job.train(p, steps, hooks);
  ReferenceOptimizer ref{.rule = "adam", .lr = 0.05};
  const ReferenceResult expected = sync_reference(p, ref, steps, 2);
  for (int k = 0; k < 2; ++k) {
    expect_near(results[k].w, expected.w, 1e-12, "w of worker " + std::to_string(k));
    expect_near(results[k].emb, expected.emb, 1e-12, "emb of worker " + std::to_string(k));
  }
}

// An elastic job's commits over real sockets: every partition keeps its
// state at the worker's commit (answered once its replica has it too); a
// server lost after that leaves its partition to the replica, and the
// chief's restore still takes every partition back to the commit (the
// promoted replica's own copy); the redone steps give what they gave the
// first time, and steps of the rolled-back timeline are refused.
TEST(Commits, ARestoreTakesEveryPartitionBackThroughAFailover) {
  JobOptions o;
  o.servers = 2;
  o.replicas = 1;
  o.optimizer = {.rule = UpdateRule::sgd, .lr = 0.1, .momentum = 0.9};
  o.partition.num_shards = 2;  // a shard on each server
  Job job(o, 1);
  Worker worker(job.store, job.worker_options(0));
  const VariableSpec spec{.name = "w", .rows = 4, .cols = 3, .dtype = DType::f64};
  std::vector<double> init(12);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.5 * double(i) - 2;
  const void* initial[] = {init.data()};
  worker.declare({spec}, initial);
  worker.start();
  auto step = [&](int64_t s) {
    std::vector<double> g(12);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1 * double(i + 1) * double(s + 1) - 0.3;
    worker.push(0, g.data()).wait();
    worker.end_step().wait();
  };
  auto values = [&] {
    std::vector<double> v(12);
    worker.pull(0, v.data()).wait();
    return v;
  };
  step(0);
  step(1);
  worker.keep_commit();
  const std::vector<double> committed = values();
  step(2);
  step(3);
  const std::vector<double> ahead = values();
  ASSERT_NE(ahead, committed);

  job.servers[1]->stop();  // silent from now on: its partition moves to server 0
  const std::vector<int> live{0};
  worker.restore_commit(2, live, /*timeline=*/1);
  EXPECT_EQ(worker.clock(), 2);
  EXPECT_EQ(values(), committed);
  step(2);
  step(3);
  EXPECT_EQ(values(), ahead);
  const std::string stats = worker.server_stats(0);
  EXPECT_NE(stats.find("partition.0.restores=1"), std::string::npos) << stats;
  EXPECT_NE(stats.find("partition.1.restores=1"), std::string::npos) << stats;

  // A request of the old timeline (a push retained before the restore and
  // replayed after it) is refused, not staged.
  worker.rewind(worker.clock(), 0);
  std::vector<double> g(12, 1.0);
  EXPECT_THROW(worker.push(0, g.data()).wait(), Error);

  // A replacement of the worker (a new process) finds server 1 marked lost
  // in the store and asks its partition of server 0 at once, not after its
  // client's server timeout (30 s here; server 1 is stopped, not gone, so
  // its socket still takes connections and only that timeout would tell).
  WorkerOptions ro = job.worker_options(0);
  ro.client.server_timeout = std::chrono::seconds(30);
  const auto started = std::chrono::steady_clock::now();
  Worker replacement(job.store, ro);
  replacement.declare({spec}, initial);
  EXPECT_EQ(replacement.start(), 4);
  std::vector<double> v(12);
  replacement.pull(0, v.data()).wait();
  EXPECT_EQ(v, ahead);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(15));
}

}  // namespace
}  // namespace cohort::ps::training_test
