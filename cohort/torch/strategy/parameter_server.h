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
// On a server rank the constructor never returns: it serves until every
// worker has finished (or died), then ends the process with status 0 through
// std::exit, so that atexit handlers (cohort's shutdown among them) run. A
// program therefore needs no code of its own for servers; one that must do
// something on them runs ps::Server itself (cohort/parameter_server/server.h).
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
// membership epoch's world (a thread follows them) though it keeps none of
// training's state. With staleness=0 and no backup workers the strategy
// follows membership changes: an elastic fit's state is the workers'
// (elastic_group() is their engine), and at each commit every partition
// keeps its state as a commit, on its replica too (replicas=1), so that the
// survivors of a lost worker or server roll the servers back with them to
// their newest commit (ps::Worker::restore_commit) and redo the steps since.
// A replacement worker joins at a later commit; a replacement of a server's
// slot serves nothing (its partitions stay with the server that took them
// over) and only takes part in the membership until it ends (the launcher
// ends it when training is over).
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
class ShardedTraining;

struct ParameterServerOptions {
  ps::JobOptions job;
  // The program's optimizer on the workers over the servers' summed
  // gradients (job.optimizer.rule is then sum), else the servers' rule.
  bool program_optimizer = true;
};

class ParameterServerStrategy : public Strategy, public ElasticTraining {
 public:
  // Calls cohort::init() when nothing is initialized yet; collective over
  // every rank of the job. Never returns on a server rank (see above).
  explicit ParameterServerStrategy(ParameterServerOptions options);
  ~ParameterServerStrategy() override;  // the worker leaves the servers

  // ElasticTraining (see above).
  void rejoin() override;  // the workers' group of the new world
  engine::Engine* elastic_group() override { return engine_.get(); }
  // At a commit (every worker): the partitions keep their state at this
  // step; returns the step. load_own_state() rolls them back to it.
  std::string own_state() const override;
  void load_own_state(const std::string& bytes) override;

  ps::Worker& worker() { return *worker_; }
  engine::Engine& workers_engine() { return *engine_; }

 protected:
  std::string do_spec() const override;
  ReplicaPlacement do_placement() const override;
  void do_prepare() override;                     // collective over the workers
  torch::nn::Module& do_module() override;        // current values (pulled when stale)
  torch::optim::Optimizer& do_optimizer() override { return *optimizer_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor do_predict(const at::Tensor& input) override;
  at::Tensor do_all_sum(const at::Tensor& values) override;
  at::Tensor do_all_gather(const at::Tensor& rows) override;
  void do_load(torch::serialize::InputArchive& archive) override;
  ElasticTraining* do_elastic() override { return follows_membership() ? this : nullptr; }
  // The workers' engine and the world's (the servers).
  void do_abort(const std::string& reason) override;

 private:
  // Synchronous, without backup workers, in an elastic job: a step that
  // applies before every worker kept the last commit could not be rolled
  // back (partition.h).
  bool follows_membership() const;
  void pull_if_stale();
  void form_workers_group();  // workers_comm_ and engine_ over the current world's workers

  ParameterServerOptions options_;
  bool elastic_ = false;
  ps::Role role_;
  std::string namespace_;                          // of this strategy object in the world store
  std::shared_ptr<rendezvous::Store> ps_store_;    // the servers' and workers' meeting place
  int worker_index_ = 0;                           // among the servers' workers (the slot, elastic)
  std::shared_ptr<comm::Communicator> workers_comm_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<ps::Worker> worker_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ShardedTraining> training_;
  bool stale_ = false;  // the servers applied steps the module has not pulled
};

// The keys of `parameter_server:...` for make_strategy's schema.
std::vector<SpecKey> parameter_server_spec_keys();
// ParameterServerOptions from the spec's key=value pairs (as written, no
// defaults filled in) and the job's size; one-line ConfigErrors.
ParameterServerOptions parameter_server_options(const std::map<std::string, std::string>& keys, int world_size);

}  // namespace cohort
