// parameter_server: the last S ranks of the job serve the model's variables
// (cohort/parameter_server), the others train (TensorFlow's
// ParameterServerStrategy, ps-lite, BytePS):
//
//   cohortrun -np 3 prog --strategy parameter_server:servers=1
//
// Roles follow ps::assign_role (rank 0 is worker 0, the chief), so the same
// program runs under cohortrun, mpirun, srun and across hosts; list CPU-only
// hosts last in a hostfile to put the servers there.
//
// Roles are explicit, as ps-lite's IsServer(): the constructor returns on
// every rank, and a server rank's program serves instead of training:
//
//   auto strategy = cohort::make_strategy("parameter_server:servers=1");
//   if (strategy->is_server()) return strategy->serve();  // until the workers finish; the exit status
//   cohort::Model model(*strategy, ...);                   // workers only
//
// serve() runs the server's whole life (ServerRole,
// cohort/torch/parameter_server/server_role.h: its partitions and, in an
// elastic job, the membership) and returns once training is over, its
// sockets closed and its threads joined, so that the program's destructors
// and exit handlers run as on a worker. A server trains nothing: prepare()
// (and so cohort::Model, fit()) refuses, as do placement(), all_sum() and
// all_gather(). serve() on a worker is a ConfigError.
//
// Opt-in, for programs written before roles were explicit:
// `serve_and_exit=true` (ParameterServerOptions::serve_and_exit) makes the
// constructor serve on a server rank and end the process with serve()'s
// status (std::exit: exit handlers run, the program's own destructors do
// not), so that the program's code after make_strategy() runs on workers
// only and need not branch.
//
// On a worker, the strategy is one replica per worker; its collectives
// (all_sum, all_gather) run on an engine over the workers only. Where the
// optimizer runs is the spec's `optimizer` key:
//   optimizer=program       (the default) the servers sum the workers'
//                           gradients of a step and every worker steps the
//                           program's own torch optimizer on their mean
//                           (BytePS's summation service): any optimizer and
//                           learning-rate schedule, results as
//                           multi_worker's; lock-step only (staleness=0, no
//                           backup_workers: a lagging worker would miss a
//                           step's sum and its replica would drift)
//   optimizer=sgd|adam|adagrad  the servers hold the variables and the
//                           optimizer's state and apply it (lr, momentum,
//                           ... from the spec, not the program's optimizer,
//                           whose learning rate then has no effect); workers
//                           pull the values each step
// With hybrid=true only the model's PsEmbedding tables live on the servers
// (with the servers' optimizer); the dense layers are averaged by allreduce
// among the workers and step the program's optimizer. staleness=K|async,
// backup_workers=B, shards, replicas, ... are the job's (ps::JobOptions,
// cohort/parameter_server/options.h).
//
// Elastic jobs (cohortrun --min-np): roles follow slots, not ranks (the last
// S of the -np slots started serve), and every server takes part in each
// membership epoch's world (ServerRole's thread follows them, from the
// constructor on) though it keeps none of training's state. With staleness=0 and no backup workers the strategy
// follows membership changes: an elastic fit's state is the workers'
// (elastic_group() is their engine), and at each commit every partition
// keeps its state as a commit, on its replica too (replicas=1), so that the
// survivors of a lost worker or server roll the servers back with them to
// their newest commit (ps::Worker::restore_commit) and redo the steps since.
// A replacement worker joins at a later commit; a replacement of a server's
// slot serves nothing (its partitions stay with the server that took them
// over) and only takes part in the membership until it ends (the launcher
// ends it when training is over), when its serve() returns 0.
//
// A worker's share of the global batch is weighted as multi_worker's, so at
// staleness=0 an update applies the gradient of the global batch's mean
// loss. Checkpoints (save/load) hold the module and the program's optimizer
// as replicated strategies do; with the optimizer on the servers, load()
// refuses (the servers' optimizer state is not in the archive: use
// checkpoint_dir and ps::Worker::save for those jobs).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/common/spec.h"
#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/rendezvous/store.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

namespace comm {
class Communicator;
}
namespace engine {
class Engine;
}
namespace ps {
class Worker;
}
class ServerRole;
class ShardedTraining;

// The processes of a job when they are not cohort::init()'s world: ranks as
// threads of one process (tests), each rank with its own communicator over
// all of them. A job of fixed size (elastic jobs are init()'s).
struct ParameterServerWorld {
  std::shared_ptr<comm::Communicator> comm;  // this rank's, over every rank of the job
  std::shared_ptr<rendezvous::Store> store;  // the job's, shared by every rank
  std::string secret;                        // the servers' transport secret (the launcher's COHORT_SECRET)
};

struct ParameterServerOptions {
  ps::JobOptions job;
  // The program's optimizer on the workers over the servers' summed
  // gradients (job.optimizer.rule is then sum), else the servers' rule.
  bool program_optimizer = true;
  // On a server rank the constructor serves and ends the process with the
  // status (see above) instead of returning.
  bool serve_and_exit = false;
  // comm null: cohort::init()'s world, initialized now if nothing is.
  ParameterServerWorld world;
};

class ParameterServerStrategy : public Strategy, public ElasticTraining {
 public:
  // Calls cohort::init() when nothing is initialized yet (unless
  // options.world names the ranks); collective over every rank of the job.
  // Returns on every rank, unless serve_and_exit on a server (see above).
  explicit ParameterServerStrategy(ParameterServerOptions options);
  ~ParameterServerStrategy() override;  // a worker leaves the servers; a server's role ends

  // ElasticTraining (see above).
  void rejoin() override;  // the workers' group of the new world
  engine::Engine* elastic_group() override { return engine_.get(); }
  // At a commit (every worker): the partitions keep their state at this
  // step; returns the step. load_own_state() rolls them back to it.
  std::string own_state() const override;
  void load_own_state(const std::string& bytes) override;

  // A worker's client of the servers and its group's engine (ConfigError on
  // a server).
  ps::Worker& worker();
  engine::Engine& workers_engine();
  // A server's role, which serve() runs (null on a worker).
  ServerRole* server_role() { return server_.get(); }

 protected:
  std::string do_spec() const override;
  ReplicaPlacement do_placement() const override;  // the workers'; ConfigError on a server
  void do_prepare() override;                      // collective over the workers
  torch::nn::Module& do_module() override;         // current values (pulled when stale)
  torch::optim::Optimizer& do_optimizer() override { return *optimizer_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor do_predict(const at::Tensor& input) override;
  at::Tensor do_all_sum(const at::Tensor& values) override;
  at::Tensor do_all_gather(const at::Tensor& rows) override;
  void do_load(torch::serialize::InputArchive& archive) override;
  ElasticTraining* do_elastic() override { return follows_membership() ? this : nullptr; }
  // A worker: the workers' engine and the world's; a server: stops serving.
  void do_abort(const std::string& reason) override;
  bool do_is_server() const override { return role_.server; }
  int do_serve() override;

 private:
  // Synchronous, without backup workers, in an elastic job, on a worker: a
  // step that applies before every worker kept the last commit could not
  // be rolled back (partition.h).
  bool follows_membership() const;
  // ConfigError naming `call` on a server.
  void require_worker(const char* call) const;
  void pull_if_stale();
  // workers_comm_ and engine_ over `comm`, the current world's workers.
  void use_workers_group(std::shared_ptr<comm::Communicator> comm);

  ParameterServerOptions options_;
  bool elastic_ = false;
  ps::Role role_;
  std::string namespace_;                          // of this strategy object in the world store
  std::shared_ptr<rendezvous::Store> job_store_;   // the world's store (or options.world's)
  std::shared_ptr<rendezvous::Store> ps_store_;    // the servers' and workers' meeting place
  int worker_index_ = 0;                           // among the servers' workers (the slot, elastic)
  std::shared_ptr<comm::Communicator> workers_comm_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<ps::Worker> worker_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ShardedTraining> training_;
  bool stale_ = false;  // the servers applied steps the module has not pulled
  std::unique_ptr<ServerRole> server_;  // a server's
};

// The keys of `parameter_server:...` for make_strategy's schema.
std::vector<SpecKey> parameter_server_spec_keys();
// ParameterServerOptions from the spec's key=value pairs (as written, no
// defaults filled in) and the job's size; one-line ConfigErrors.
ParameterServerOptions parameter_server_options(const std::map<std::string, std::string>& keys, int world_size);

}  // namespace cohort
