// Worker: a training process's side of the parameter servers (ps-lite's
// KVWorker): asynchronous push, pull and push-pull of whole variables or of
// rows, each returning a Handle.
//
//   ps::Worker worker(store, {.worker = w, .num_workers = W, .num_servers = S, .job = job});
//   worker.declare(variables, initial_values);   // same list on every worker
//   worker.start();                              // joins at the job's current step
//   for (...) {
//     worker.pull(v, params).wait();             // the values this step may read
//     ... compute gradients ...
//     worker.push(v, grads);                     // staged on the servers
//     worker.end_step();                         // commits the step everywhere
//   }
//   worker.finish();
//
// Each call splits along the layout's shards into one request per shard
// (one handle for all of them). The worker's clock counts its end_step()
// calls; a pull reads what the consistency rule lets a worker at that clock
// read (partition.h). Requests carry ids; pushes and commits are kept until
// the server says their step is settled, so that after a server dies they
// are replayed to the server that takes its partition over, which ignores
// whatever it already has (a step is applied at most once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/parameter_server/handle.h"
#include "cohort/parameter_server/layout.h"
#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/transport_options.h"
#include "cohort/rendezvous/store.h"

namespace cohort::ps {

class Client;
enum class Op : uint16_t;  // wire.h

struct WorkerOptions {
  int worker = 0;
  int num_workers = 1;
  int num_servers = 1;
  JobOptions job;
  std::string secret;
  ClientOptions client = client_options_from_env();
  // Why an elastic job's world was abandoned, or nullopt (the strategy
  // passes cohort::world_abandoned): polled while wait() waits, so that a
  // wait on the servers gives up as a collective would. Unset: wait() is
  // wait_all().
  std::function<std::optional<std::string>()> abandoned;
};

class Worker {
 public:
  // Connects to every server (addresses from the store, waiting for them).
  Worker(std::shared_ptr<rendezvous::Store> store, WorkerOptions options);
  ~Worker();  // finish() when not called yet, errors swallowed
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Lays the variables out and creates their shards with the given initial
  // values (initial[v]: rows x cols elements of its dtype, or nullptr for a
  // variable whose spec names an Initializer, generated on the servers);
  // the first worker's values win, so every worker should pull before
  // training.
  void declare(std::vector<VariableSpec> variables, std::span<const void* const> initial);
  const Layout& layout() const { return layout_; }

  // Fills every partition from a checkpoint directory (checkpoint.h); call
  // between declare() and start() on the chief.
  void load(const std::string& dir);

  // Joins the job and returns the clock this worker starts at: 0 at the
  // start, the partitions' current step for a replacement. Workers other
  // than worker 0 wait here until worker 0 has started (its declarations
  // and load are in place).
  int64_t start();
  int64_t clock() const { return clock_.load(); }

  Handle pull(uint32_t variable, void* out);
  Handle push(uint32_t variable, const void* grad);
  // Push, then the values after this step (clock + 1): with optimizer=sum,
  // the mean of the workers' gradients of the step.
  Handle push_pull(uint32_t variable, const void* grad, void* out);
  // rows: distinct and ascending (deduplicate() in sparse.h); out/grad:
  // rows.size() rows of the variable's cols.
  Handle pull_rows(uint32_t variable, std::span<const int64_t> rows, void* out);
  Handle push_rows(uint32_t variable, std::span<const int64_t> rows, const void* grad);

  // Commits this worker's step on every partition and advances its clock.
  Handle end_step();

  // Waits for these calls of this worker, all of them, then rethrows the
  // first failure (wait_all()). With options().abandoned, polls it
  // meanwhile; once it gives a reason (or after COHORT_TIMEOUT_S), fails
  // what is still pending (those steps are redone from a commit) and
  // throws PeerLostError (TimeoutError). Either way no reply lands in a
  // caller's buffer after it returns or throws.
  void wait(const std::vector<Handle>& handles);

  // ---- commits (elastic jobs: cohort/torch/strategy/parameter_server.h)
  // Synchronous jobs without backup workers. Every partition keeps its state
  // at this worker's clock (the steps every worker has ended) as a commit,
  // on its replica too; returns once they all have. Each worker may call it
  // at the same clock: a partition keeps a version once.
  void keep_commit();
  // This worker's clock back to `clock` (a commit's), its requests of the
  // steps after it forgotten: pending ones fail, retained ones are never
  // replayed (those steps are redone), and what it sends from now on is of
  // `timeline` (every worker of the restore passes the same, larger than
  // any before; partitions refuse steps of older ones).
  void rewind(int64_t clock, uint64_t timeline);
  uint64_t timeline() const;
  // One worker (the chief): rewind(clock, timeline), then every partition
  // goes back to its commit at `clock` in `timeline`, with the workers
  // `live` going on and the others dead (partition.h); returns once every
  // replica has the restored state. Error naming the kept commits when a
  // partition lacks it. The others rewind() and must not push before this
  // returned.
  void restore_commit(int64_t clock, std::span<const int> live, uint64_t timeline);

  // Chief: every partition writes its shards under `dir` once the current
  // step is applied, then the manifest; returns when it is written.
  void save(const std::string& dir);

  // Leaves: servers stop counting this worker. Idempotent.
  void finish();

  // A server's counters (Server::stats format).
  std::string server_stats(int server);
  // Requests and bytes this worker sent and received.
  TransportCounters counters() const;
  const WorkerOptions& options() const { return options_; }

 private:
  void on_server_lost(int server, const std::string& why);
  // Fails this worker's pending requests to every partition and forgets its
  // retained ones (client.h's fail_partition), saying `why`.
  void fail_pending(const std::string& why);
  // One request of `op` to every partition (`step`; `text`, when not
  // empty, as its frame), waited for with wait(); `what` names them.
  void to_every_partition(Op op, int64_t step, const std::string& text, const std::string& what);
  void track(int partition, int64_t version);
  std::vector<std::pair<const ShardInfo*, std::span<const int64_t>>> split(uint32_t variable,
                                                                           std::span<const int64_t> rows) const;

  std::shared_ptr<rendezvous::Store> store_;
  WorkerOptions options_;
  std::unique_ptr<Client> client_;
  Layout layout_;
  std::atomic<int64_t> clock_{0};
  std::mutex seen_mutex_;
  std::vector<int64_t> seen_version_;  // per partition, the highest version replies carried
  bool finished_ = false;
  // Held by rewind() and by a failover's rejoin of a partition's new owner:
  // the join it sends names the clock of the timeline it is stamped with.
  std::mutex timeline_mutex_;
};

}  // namespace cohort::ps
