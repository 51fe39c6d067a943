#include "cohort/torch/strategy/parameter_server.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/create.h"
#include "cohort/engine/engine.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/server.h"
#include "cohort/parameter_server/worker.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/parameter_server/sharded_training.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/strategy/data_parallel_step.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

SpecKey number_key(const char* name, const char* description) {
  return {.name = name, .kind = Kind::number, .description = description, .optional = true};
}

SpecKey integer_key(const char* name, const char* description, int64_t min) {
  return {.name = name, .kind = Kind::integer, .description = description, .min = min, .optional = true};
}

// The workers' group of the current world: a split of a copy of it, in
// which every member takes part (servers get nothing back). Named by the
// membership epoch in an elastic job, whose worlds follow one another.
std::shared_ptr<comm::Communicator> split_workers(const std::string& ns, const ps::Role& role) {
  const std::string name = ns + "/world" + (elastic() ? "/" + std::to_string(membership_epoch()) : "");
  const std::unique_ptr<comm::Communicator> copy = create_world_communicator(name);
  std::shared_ptr<comm::Communicator> split = copy->split(role.server ? 1 : 0, role.index);
  if (role.server) split.reset();
  return split;
}

// An elastic job's server: a member of every membership epoch, though it
// keeps none of training's state. This thread follows the epochs: when the
// launcher publishes a new one (or abandons the current world), it forms
// the new world with the others and takes part in the split that gives the
// workers their group, as the workers' rejoin() does. `on_end` gets the
// process's exit status when the membership ends for this process (0: the
// job ended or left it out; 1: an error).
class MembershipFollower {
 public:
  MembershipFollower(std::string ns, ps::Role role, std::function<void(int)> on_end)
      : ns_(std::move(ns)), role_(role), on_end_(std::move(on_end)), thread_([this] { run(); }) {}
  ~MembershipFollower() {
    if (thread_.joinable()) thread_.detach();  // stop() said it cannot be joined
  }
  // Stops following; false when the thread is inside a world's formation,
  // which cannot be interrupted (the process must then end without it).
  bool stop() {
    stopping_ = true;
    if (forming_) return false;
    thread_.join();
    return true;
  }

 private:
  void run() {
    using namespace std::chrono_literals;
    while (!stopping_) {
      std::this_thread::sleep_for(20ms);
      try {
        if (!membership_changed() && !world_abandoned()) continue;
        forming_ = true;
        if (stopping_) break;
        reform();
        split_workers(ns_, role_);
        forming_ = false;
        COHORT_LOG(info) << "parameter server " << role_.index << ": membership epoch " << membership_epoch()
                         << ", rank " << rank() << " of " << size();
      } catch (const comm::ElasticLeave& e) {
        return end(0, std::string("left the job: ") + e.what());
      } catch (const rendezvous::MembershipEnded& e) {
        return end(0, std::string("the job ended: ") + e.what());
      } catch (const PeerLostError& e) {
        // A member lost while the workers' group formed: the next epoch.
        forming_ = false;
        COHORT_LOG(warn) << "parameter server " << role_.index << ": " << e.what() << "; following the next epoch";
      } catch (const std::exception& e) {
        return end(1, e.what());
      }
    }
    forming_ = false;
  }
  void end(int status, const std::string& why) {
    forming_ = false;
    if (status == 0)
      COHORT_LOG(info) << "parameter server " << role_.index << ": " << why;
    else
      COHORT_LOG(error) << "parameter server " << role_.index << ": " << why;
    on_end_(status);
  }

  std::string ns_;
  ps::Role role_;
  std::function<void(int)> on_end_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> forming_{false};
  std::thread thread_;
};

// Serves partitions of the job until every worker has left, then ends the
// process (see the header: the program's code after make_strategy is the
// workers'). In an elastic job it follows the membership meanwhile; a
// replacement of a server's slot serves nothing (a lost server's
// partitions stay with the one that took them over) and ends when the
// workers are done.
[[noreturn]] void serve_and_exit(std::shared_ptr<rendezvous::Store> store, const rendezvous::LaunchInfo& info,
                                 const ps::Role& role, const ps::JobOptions& job, const std::string& ns,
                                 bool elastic_job) {
  std::atomic<int> status{0};
  std::atomic<bool> membership_ended{false};
  std::unique_ptr<ps::Server> server;
  std::unique_ptr<MembershipFollower> follower;
  bool clean = true;
  try {
    const bool spare = elastic_job && info.elastic_incarnation > 0;
    if (!spare) server = std::make_unique<ps::Server>(store, ps::server_options_for(info, role, job));
    if (elastic_job)
      follower = std::make_unique<MembershipFollower>(ns, role, [&](int s) {
        status = s;
        membership_ended = true;
        if (server) server->stop();
      });
    if (spare) {
      COHORT_LOG(info) << "parameter server slot " << info.elastic_slot << " started again: its partitions stay with "
                       << "the server that took them over; this process only follows the membership";
      // Until training is over: the launcher ends the membership when the
      // first member (a worker) exits 0.
      const auto root = world_store();
      try {
        while (!membership_ended) {
          rendezvous::throw_if_ended(*root);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      } catch (const rendezvous::MembershipEnded&) {
      }
    } else {
      COHORT_LOG(info) << "parameter server " << role.index << " of " << role.num_servers << " serving "
                       << role.num_workers << " worker(s): " << ps::describe(job);
      server->run();
      // What the consistency rules did, for the user (and the backup_workers
      // test): late_dropped counts gradients a step went on without.
      const ps::PartitionCounters c = server->totals();
      COHORT_LOG(info) << "parameter server " << role.index << " done: steps_applied=" << c.steps_applied
                       << " late_dropped=" << c.late_dropped << " stale_ignored=" << c.stale_ignored
                       << " discarded_steps=" << c.discarded_steps << " max_staleness=" << c.max_staleness
                       << " restores=" << c.restores;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parameter server %d: %s\n", role.index, e.what());
    status = 1;
  }
  if (follower) clean = follower->stop();
  std::fflush(nullptr);
  // A follower inside a world's formation cannot be joined, and the exit
  // handlers would wait for that world: end without them.
  if (!clean) std::_Exit(status);
  server.reset();
  std::exit(status);
}

}  // namespace

std::vector<SpecKey> parameter_server_spec_keys() {
  return {
      {.name = "servers", .kind = Kind::integer, .default_value = "1",
       .description = "the last S ranks serve, the others train", .min = 1},
      {.name = "staleness", .kind = Kind::word, .default_value = "0",
       .description = "0 synchronous, K steps ahead of the slowest at most, or async"},
      integer_key("backup_workers", "staleness=0: a step goes on without the last B workers' gradients", 0),
      {.name = "optimizer", .kind = Kind::word, .default_value = "program",
       .description = "program: the servers sum gradients, workers step the program's optimizer; or the "
                      "servers' own",
       .words = {"program", "sgd", "adam", "adagrad"}},
      number_key("lr", "servers' optimizer: learning rate (default 0.01)"),
      number_key("momentum", "optimizer=sgd: momentum"),
      number_key("weight_decay", "servers' optimizer: L2 weight decay"),
      number_key("beta1", "optimizer=adam"),
      number_key("beta2", "optimizer=adam"),
      number_key("eps", "optimizer=adam|adagrad"),
      number_key("initial_accumulator", "optimizer=adagrad"),
      integer_key("shards", "shards per variable (default: by min_shard_bytes)", 1),
      integer_key("min_shard_bytes", "smallest shard of a variable split by size (default 256 KiB)", 1),
      integer_key("max_shards", "most shards of a variable split by size (default: servers)", 1),
      integer_key("replicas", "1: a copy of each partition on the next server (needs servers >= 2)", 0),
      integer_key("replicate_every", "updates between replica snapshots (default 1)", 1),
      {.name = "checkpoint_dir", .kind = Kind::word, .description = "where a lost server's shards are restored from",
       .optional = true},
      {.name = "hybrid", .kind = Kind::boolean, .description = "dense parameters allreduced among the workers, "
                                                               "only embedding tables on the servers",
       .optional = true},
  };
}

ParameterServerOptions parameter_server_options(const std::map<std::string, std::string>& keys, int world_size) {
  std::map<std::string, std::string> job_keys = keys;
  const auto optimizer = keys.find("optimizer");
  const bool program = optimizer == keys.end() || optimizer->second == "program";
  job_keys["optimizer"] = program ? "sum" : optimizer->second;
  ParameterServerOptions o{.job = ps::parse_job_options(job_keys, world_size), .program_optimizer = program};
  COHORT_CHECK_AS(ConfigError, !o.job.hybrid || !program)
      << "parameter_server: hybrid=true keeps only embedding tables on the servers, which need an optimizer "
         "there (optimizer=sgd|adam|adagrad); the dense layers step the program's";
  return o;
}

COHORT_REGISTER_STRATEGY(parameter_server, {
    .name = "parameter_server",
    .description = "the last S ranks hold the variables (sharded), the others train; sync to async",
    .keys = parameter_server_spec_keys(),
    .model_requirements = "hybrid=true: the embedding tables as cohort::PsEmbedding (the rest is averaged among "
                          "the workers)",
    .elastic = "staleness=0, without backup_workers",
    .make = [](const Spec& spec) -> std::unique_ptr<Strategy> {
      // The job's size decides the roles; init() is the strategy's.
      return std::make_unique<ParameterServerStrategy>(
          parameter_server_options(spec.values, rendezvous::discover().size));
    }});

ParameterServerStrategy::ParameterServerStrategy(ParameterServerOptions options) : options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, options_.program_optimizer == (options_.job.optimizer.rule == ps::UpdateRule::sum))
      << "parameter_server: program_optimizer means the servers' rule is sum";
  if (!initialized()) init();
  const rendezvous::LaunchInfo info = rendezvous::discover();
  elastic_ = cohort::elastic();
  // In an elastic job a rank changes with the membership, a slot does not:
  // roles follow the slots of the -np processes started (epoch 0's).
  const int slot = elastic_ ? info.elastic_slot : cohort::rank();
  const int slots = elastic_ ? rendezvous::read_membership(*world_store(), 0).size() : cohort::size();
  COHORT_CHECK_AS(ConfigError, slot < slots)
      << "parameter_server: slot " << slot << " was added to the elastic job (host discovery); a parameter-server "
      << "job keeps the " << slots << " slots it started with (--max-np above -np is not supported)";
  role_ = ps::assign_role(slot, slots, options_.job.servers);
  // Every strategy object of a job takes its own namespace (all processes
  // build them in the same order; a replacement counts its own from 1).
  const auto world = world_store();
  const std::string me = elastic_ ? std::to_string(slot) + "." + std::to_string(info.elastic_incarnation)
                                  : std::to_string(cohort::rank());
  const int64_t instance = world->add("ps_strategy/instances/" + me, 1);
  namespace_ = "ps_strategy/" + std::to_string(instance);
  // Servers and workers meet under one namespace (server addresses, ...).
  ps_store_ = std::make_shared<rendezvous::PrefixStore>(namespace_ + "/ps", world);
  if (role_.server) {
    // The servers take part in the workers' split (it is collective).
    split_workers(namespace_, role_);
    serve_and_exit(ps_store_, info, role_, options_.job, namespace_, elastic_);
  }
  worker_index_ = role_.index;
  form_workers_group();
  ps::WorkerOptions wo{.worker = role_.index, .num_workers = role_.num_workers, .num_servers = role_.num_servers,
                       .job = options_.job, .secret = info.secret};
  if (elastic_) {
    // A wait on the servers gives up with the world, as a collective would.
    wo.abandoned = [] { return world_abandoned(); };
    // A server whose connection closed is taken for dead at once (the
    // launcher says so too), as gloo's peers are in an elastic world.
    wo.client.reconnect_grace = std::min(wo.client.reconnect_grace, ps::Millis(comm::kElasticFailureGrace));
  }
  worker_ = std::make_unique<ps::Worker>(ps_store_, std::move(wo));
}

void ParameterServerStrategy::form_workers_group() {
  // The new group first: a member lost meanwhile leaves the old one in
  // place (failed), never none.
  std::shared_ptr<comm::Communicator> comm = split_workers(namespace_, role_);
  COHORT_CHECK(comm && comm->size() <= role_.num_workers &&
               (elastic_ || (comm->rank() == worker_index_ && comm->size() == role_.num_workers)))
      << "parameter_server: the workers' group came out of split with the wrong rank or size";
  engine::EngineOptions eo;
  eo.label = "ps_workers";
  if (elastic_) eo.liveness_probe = kElasticLivenessProbe;
  const std::string suffix = elastic_ ? "/" + std::to_string(membership_epoch()) : "";
  auto engine = std::make_unique<engine::Engine>(
      comm, std::make_shared<rendezvous::PrefixStore>(namespace_ + "/engine" + suffix, world_store()), eo);
  engine_ = std::move(engine);
  workers_comm_ = std::move(comm);
}

ParameterServerStrategy::~ParameterServerStrategy() {
  training_.reset();
  if (worker_) {
    try {
      worker_->finish();
    } catch (const std::exception& e) {
      COHORT_LOG(warn) << "parameter_server: leaving the servers: " << e.what();
    }
  }
  worker_.reset();
  engine_.reset();
  workers_comm_.reset();
}

std::string ParameterServerStrategy::do_spec() const {
  const ps::JobOptions& j = options_.job;
  std::string s = "parameter_server:optimizer=" +
                  std::string(options_.program_optimizer ? "program" : ps::update_rule_name(j.optimizer.rule)) +
                  ",servers=" + std::to_string(j.servers) +
                  ",staleness=" + (j.staleness == ps::kAsync ? std::string("async") : std::to_string(j.staleness));
  if (j.backup_workers) s += ",backup_workers=" + std::to_string(j.backup_workers);
  return s;
}

// The workers of the current world (fewer than the slots after a loss).
ReplicaPlacement ParameterServerStrategy::do_placement() const {
  return {.replicas_in_sync = workers_comm_->size(), .local_replicas = 1, .process_count = workers_comm_->size(),
          .process_index = workers_comm_->rank()};
}

void ParameterServerStrategy::do_prepare() {
  torch::nn::Module& module = *model().module;
  optimizer_ = make_optimizer(module.parameters());
  // Worker 0's parameters and buffers (BatchNorm statistics stay on the
  // workers) everywhere; ShardedTraining declares worker 0's on the servers.
  // Not for a process joining an elastic job: the members' ElasticState
  // hands it their state (and their rejoin() broadcasts nothing).
  const bool sync_state = detail::prepare_syncs_state();
  if (sync_state) broadcast_parameters(module, 0, engine_.get());
  ShardedTrainingOptions o;
  o.dense = options_.job.hybrid           ? DenseMode::hybrid
            : options_.program_optimizer ? DenseMode::summation
                                         : DenseMode::servers;
  o.worker_engine = engine_.get();
  o.sync_from_chief = sync_state;
  training_ = std::make_unique<ShardedTraining>(*worker_, module, o);
  if (sync_state) broadcast_optimizer_state(*optimizer_, 0, engine_.get());
  stale_ = true;  // nothing pulled yet
}

void ParameterServerStrategy::pull_if_stale() {
  // Only with the optimizer on the servers are the workers' values behind.
  if (!stale_ || !training_ || training_->dense_mode() != DenseMode::servers) return;
  training_->pull();
  stale_ = false;
}

torch::nn::Module& ParameterServerStrategy::do_module() {
  pull_if_stale();
  return *model().module;
}

StepResult ParameterServerStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_AS(ConfigError, global_rows > 0) << "parameter_server: a step of no rows on any worker";
  StepResult result{.rows = mine.rows()};
  zero_grad_to_none(*optimizer_);
  training_->begin_step();
  stale_ = false;
  // The servers (or the hybrid allreduce) average the workers' gradients:
  // weighted by its share of the rows, a worker's mean loss makes that
  // average the global batch's mean-loss gradient.
  const at::Tensor loss = detail::data_parallel_loss(model(), mine, global_rows, process_count(), result);
  loss.backward();
  training_->end_step(optimizer_.get());
  stale_ = training_->dense_mode() == DenseMode::servers;
  return result;
}

at::Tensor ParameterServerStrategy::do_predict(const at::Tensor& input) {
  pull_if_stale();
  return Strategy::do_predict(input);
}

bool ParameterServerStrategy::follows_membership() const {
  // A step that applies before every worker kept the last commit could not
  // be rolled back (partition.h).
  return elastic_ && options_.job.staleness == 0 && options_.job.backup_workers == 0;
}

void ParameterServerStrategy::rejoin() {
  require_prepared("rejoin()");
  // The servers' followers take part in the new world's split.
  form_workers_group();
  training_->set_worker_engine(engine_.get());
  // The interrupted step's gradients are not state (a commit holds none).
  zero_grad_to_none(*optimizer_);
}

std::string ParameterServerStrategy::own_state() const {
  if (!follows_membership()) return {};
  // Every worker asks (a partition keeps a version once): whichever member
  // survives holding this commit, the servers hold its step too. Not a
  // process joining: its first sync takes a placeholder of its own state,
  // at the clock it joined at, which the members' commit then replaces.
  if (!elastic_joining()) worker_->keep_commit();
  return std::to_string(worker_->clock());
}

void ParameterServerStrategy::load_own_state(const std::string& bytes) {
  if (!follows_membership()) return ElasticTraining::load_own_state(bytes);
  int64_t clock = 0;
  try {
    clock = std::stoll(bytes);
  } catch (const std::exception&) {
    COHORT_THROW(ConfigError) << "parameter_server: an elastic commit's step is '" << bytes << "', not a number";
  }
  // The chief names the workers that go on; the partitions count the
  // others out at once (no worker timeout) and go back to the commit, in a
  // timeline after every one the workers have been in (so that steps of the
  // rolled-back ones, replayed to a partition's new owner, are refused).
  const at::Tensor mine = at::tensor({int64_t(worker_index_), int64_t(worker_->timeline())}, at::kLong);
  const at::Tensor all = allgather(mine.view({1, 2}), {.engine = engine_.get()}).contiguous();
  const uint64_t timeline = uint64_t(all.select(1, 1).max().item<int64_t>()) + 1;
  at::Tensor failed = at::zeros({1}, at::kLong);
  if (process_index() == 0) {
    std::vector<int> live;
    for (int64_t i = 0; i < all.size(0); ++i) live.push_back(int(all[i][0].item<int64_t>()));
    try {
      worker_->restore_commit(clock, live, timeline);
    } catch (const PeerLostError&) {
      throw;  // the world is abandoned again: the others' broadcast below fails too, and all recover
    } catch (const std::exception& e) {
      COHORT_LOG(error) << "parameter_server: " << e.what();
      failed.fill_(1);
    }
  } else {
    worker_->rewind(clock, timeline);
  }
  // Nobody pushes a step of the new timeline before the partitions are back.
  failed = broadcast(failed, {.root = 0, .engine = engine_.get()});
  COHORT_CHECK(failed.item<int64_t>() == 0)
      << "parameter_server: the servers could not go back to the commit at step " << clock
      << " (worker 0's log says why)";
  stale_ = true;
}

void ParameterServerStrategy::do_abort(const std::string& reason) {
  if (engine_) engine_->abort(reason);
  if (initialized()) current_engine().abort(reason);
}

at::Tensor ParameterServerStrategy::do_all_sum(const at::Tensor& values) {
  return allreduce(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

at::Tensor ParameterServerStrategy::do_all_gather(const at::Tensor& rows) {
  return allgather(rows, {.engine = engine_.get()});
}

void ParameterServerStrategy::do_load(torch::serialize::InputArchive& archive) {
  COHORT_CHECK_AS(ConfigError, options_.program_optimizer && !options_.job.hybrid)
      << "parameter_server: with the optimizer on the servers (or hybrid), a checkpoint of the strategy lacks "
         "the servers' state; restore through checkpoint_dir (ps::Worker::save) instead";
  Strategy::do_load(archive);
  // The servers only sum gradients in this mode: the loaded values are the
  // workers' (every worker loads the same archive), nothing to send.
}

}  // namespace cohort
