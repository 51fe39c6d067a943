#include "cohort/torch/strategy/parameter_server.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cohort/comm/communicator.h"
#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/engine/engine.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/worker.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/parameter_server/server_role.h"
#include "cohort/torch/parameter_server/sharded_training.h"
#include "cohort/torch/parameter_server/workers_group.h"
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

}  // namespace

std::vector<SpecKey> parameter_server_spec_keys() {
  return {
      {.name = "servers",
       .kind = Kind::integer,
       .default_value = "1",
       .description = "the last S ranks serve, the others train",
       .min = 1},
      {.name = "staleness",
       .kind = Kind::word,
       .default_value = "0",
       .description = "0 synchronous, K steps ahead of the slowest at most, or async"},
      integer_key("backup_workers", "staleness=0: a step goes on without the last B workers' gradients", 0),
      {.name = "optimizer",
       .kind = Kind::word,
       .default_value = "program",
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
      {.name = "checkpoint_dir",
       .kind = Kind::word,
       .description = "where a lost server's shards are restored from",
       .optional = true},
      {.name = "hybrid",
       .kind = Kind::boolean,
       .description = "dense parameters allreduced among the workers, "
                      "only embedding tables on the servers",
       .optional = true},
      {.name = "serve_and_exit",
       .kind = Kind::boolean,
       .default_value = "false",
       .description = "a server rank serves and ends the process inside make_strategy() (no is_server() branch "
                      "in the program)"},
  };
}

ParameterServerOptions parameter_server_options(const std::map<std::string, std::string>& keys, int world_size) {
  std::map<std::string, std::string> job_keys = keys;
  const auto optimizer = keys.find("optimizer");
  const bool program = optimizer == keys.end() || optimizer->second == "program";
  job_keys["optimizer"] = program ? "sum" : optimizer->second;
  // The strategy's own key; the rest are the job's.
  const Spec strategy_keys{.name = "parameter_server", .values = keys};
  const bool serve_and_exit = strategy_keys.has("serve_and_exit") && strategy_keys.boolean("serve_and_exit");
  job_keys.erase("serve_and_exit");
  ParameterServerOptions o{.job = ps::parse_job_options(job_keys, world_size),
                           .program_optimizer = program,
                           .serve_and_exit = serve_and_exit};
  COHORT_CHECK_AS(ConfigError, !o.job.hybrid || !program)
      << "parameter_server: hybrid=true keeps only embedding tables on the servers, which need an optimizer "
         "there (optimizer=sgd|adam|adagrad); the dense layers step the program's";
  return o;
}

COHORT_REGISTER_STRATEGY(
    parameter_server,
    {.name = "parameter_server",
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
  const ParameterServerWorld& given = options_.world;
  COHORT_CHECK_AS(ConfigError, !given.comm == !given.store)
      << "parameter_server: a world of the program's own needs both its communicator and its store";
  rendezvous::LaunchInfo info;
  int slot = 0, slots = 1;
  if (given.comm) {
    // The servers listen on loopback (no store host) under the given secret.
    info.secret = given.secret;
    slot = info.rank = given.comm->rank();
    slots = info.size = given.comm->size();
    job_store_ = given.store;
  } else {
    if (!initialized()) init();
    info = rendezvous::discover();
    elastic_ = cohort::elastic();
    job_store_ = world_store();
    // In an elastic job a rank changes with the membership, a slot does not:
    // roles follow the slots of the -np processes started (epoch 0's).
    slot = elastic_ ? info.elastic_slot : cohort::rank();
    slots = elastic_ ? rendezvous::read_membership(*job_store_, 0).size() : cohort::size();
    COHORT_CHECK_AS(ConfigError, slot < slots)
        << "parameter_server: slot " << slot << " was added to the elastic job (host discovery); a "
        << "parameter-server job keeps the " << slots << " slots it started with (--max-np above -np is not "
        << "supported)";
  }
  role_ = ps::assign_role(slot, slots, options_.job.servers);
  // Every strategy object of a job takes its own namespace (all processes
  // build them in the same order; a replacement counts its own from 1).
  const std::string me =
      elastic_ ? std::to_string(slot) + "." + std::to_string(info.elastic_incarnation) : std::to_string(slot);
  const int64_t instance = job_store_->add("ps_strategy/instances/" + me, 1);
  namespace_ = "ps_strategy/" + std::to_string(instance);
  // Servers and workers meet under one namespace (server addresses, ...).
  ps_store_ = std::make_shared<rendezvous::PrefixStore>(namespace_ + "/ps", job_store_);
  // The workers' group: a split that every process takes part in, servers
  // too.
  std::shared_ptr<comm::Communicator> workers =
      given.comm ? split_workers(*given.comm, role_) : split_world_workers(namespace_, role_);
  if (role_.server) {
    server_ = std::make_unique<ServerRole>(ServerRoleOptions{
        .role = role_, .job = options_.job, .launch = info, .store = ps_store_, .elastic = elastic_, .ns = namespace_});
    if (options_.serve_and_exit) {
      // The opt-in of programs that do not branch on is_server(): the
      // server's role is over (sockets closed, threads joined) before the
      // exit handlers run.
      const int status = server_->run();
      std::fflush(nullptr);
      std::exit(status);
    }
    return;
  }
  worker_index_ = role_.index;
  use_workers_group(std::move(workers));
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

void ParameterServerStrategy::use_workers_group(std::shared_ptr<comm::Communicator> comm) {
  COHORT_CHECK(comm && comm->size() <= role_.num_workers &&
               (elastic_ || (comm->rank() == worker_index_ && comm->size() == role_.num_workers)))
      << "parameter_server: the workers' group came out of split with the wrong rank or size";
  engine::EngineOptions eo;
  eo.label = "ps_workers";
  if (elastic_) {
    eo.liveness_probe = kElasticLivenessProbe;
    // Members that gave up a wait on a lost server leave for the next world
    // without submitting the ops the others wait on here.
    eo.abandoned = world_abandonment_check();
  }
  const std::string suffix = elastic_ ? "/" + std::to_string(membership_epoch()) : "";
  // The new group is built before the old one goes: a member lost meanwhile
  // leaves the old one in place (failed), never none.
  auto engine = std::make_unique<engine::Engine>(
      comm, std::make_shared<rendezvous::PrefixStore>(namespace_ + "/engine" + suffix, job_store_), eo);
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
  server_.reset();
}

void ParameterServerStrategy::require_worker(const char* call) const {
  COHORT_CHECK_AS(ConfigError, !role_.server)
      << "parameter_server: " << call << " on server " << role_.index << ", which trains nothing: "
      << "`if (strategy->is_server()) return strategy->serve();` before the training code";
}

ps::Worker& ParameterServerStrategy::worker() {
  require_worker("worker()");
  return *worker_;
}

engine::Engine& ParameterServerStrategy::workers_engine() {
  require_worker("workers_engine()");
  return *engine_;
}

int ParameterServerStrategy::do_serve() { return server_->run(); }

std::string ParameterServerStrategy::do_spec() const {
  const ps::JobOptions& j = options_.job;
  std::string s = "parameter_server:optimizer=" +
                  std::string(options_.program_optimizer ? "program" : ps::update_rule_name(j.optimizer.rule)) +
                  ",servers=" + std::to_string(j.servers) +
                  ",staleness=" + (j.staleness == ps::kAsync ? std::string("async") : std::to_string(j.staleness));
  if (j.backup_workers) s += ",backup_workers=" + std::to_string(j.backup_workers);
  if (options_.serve_and_exit) s += ",serve_and_exit=true";
  return s;
}

// The workers of the current world (fewer than the slots after a loss).
ReplicaPlacement ParameterServerStrategy::do_placement() const {
  require_worker("placement()");
  return {.replicas_in_sync = workers_comm_->size(),
          .local_replicas = 1,
          .process_count = workers_comm_->size(),
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
  return elastic_ && !role_.server && options_.job.staleness == 0 && options_.job.backup_workers == 0;
}

void ParameterServerStrategy::rejoin() {
  require_prepared("rejoin()");
  // The servers' followers take part in the new world's split.
  use_workers_group(split_world_workers(namespace_, role_));
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
  if (server_) server_->stop();
  if (engine_) engine_->abort(reason);
  // The world's engine is init()'s, not the one of a world the program gave.
  if (!options_.world.comm && initialized()) current_engine().abort(reason);
}

at::Tensor ParameterServerStrategy::do_all_sum(const at::Tensor& values) {
  require_worker("all_sum()");
  return allreduce(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

at::Tensor ParameterServerStrategy::do_all_gather(const at::Tensor& rows) {
  require_worker("all_gather()");
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
