#include "cohort/torch/strategy/parameter_server.h"

#include <torch/torch.h>

#include <cstdlib>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/comm/communicator.h"
#include "cohort/engine/engine.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/server.h"
#include "cohort/parameter_server/worker.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/parameter_server/sharded_training.h"
#include "cohort/torch/strategy/prepared_model.h"
#include "cohort/torch/strategy/single_process.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

SpecKey number_key(const char* name, const char* description) {
  return {.name = name, .kind = Kind::number, .description = description, .optional = true};
}

SpecKey integer_key(const char* name, const char* description, int64_t min) {
  return {.name = name, .kind = Kind::integer, .description = description, .min = min, .optional = true};
}

// Serves partitions of the job until every worker has left, then ends the
// process (see the header: the program's code after make_strategy is the
// workers').
[[noreturn]] void serve_and_exit(std::shared_ptr<rendezvous::Store> store, const rendezvous::LaunchInfo& info,
                                 const ps::Role& role, const ps::JobOptions& job) {
  int status = 0;
  try {
    ps::Server server(std::move(store), ps::server_options_for(info, role, job));
    COHORT_LOG(info) << "parameter server " << role.index << " of " << role.num_servers << " serving "
                     << role.num_workers << " worker(s): " << ps::describe(job);
    server.run();
    // What the consistency rules did, for the user (and the backup_workers
    // test): late_dropped counts gradients a step went on without.
    const ps::PartitionCounters c = server.totals();
    COHORT_LOG(info) << "parameter server " << role.index << " done: steps_applied=" << c.steps_applied
                     << " late_dropped=" << c.late_dropped << " stale_ignored=" << c.stale_ignored
                     << " discarded_steps=" << c.discarded_steps << " max_staleness=" << c.max_staleness;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parameter server %d: %s\n", role.index, e.what());
    status = 1;
  }
  std::fflush(nullptr);
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

ParameterServerStrategy::ParameterServerStrategy(ParameterServerOptions options) : options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, options_.program_optimizer == (options_.job.optimizer.rule == ps::UpdateRule::sum))
      << "parameter_server: program_optimizer means the servers' rule is sum";
  if (!initialized()) init();
  const rendezvous::LaunchInfo info = rendezvous::discover();
  const ps::Role role = ps::assign_role(cohort::rank(), cohort::size(), options_.job.servers);
  // Every strategy object of a job takes its own namespace (all ranks build
  // them in the same order).
  auto world = world_store();
  const int64_t instance = world->add("ps_strategy/instances/" + std::to_string(cohort::rank()), 1);
  const std::string ns = "ps_strategy/" + std::to_string(instance);
  // Servers and workers meet under one namespace (server addresses, ...).
  auto ps_store = std::make_shared<rendezvous::PrefixStore>(ns + "/ps", world);
  // The workers' own group, for all_sum and hybrid allreduces: the servers
  // take part in the split (it is collective) and drop their side.
  std::shared_ptr<comm::Communicator> split;
  {
    const std::unique_ptr<comm::Communicator> copy = create_world_communicator(ns + "/world");
    split = copy->split(role.server ? 1 : 0, role.index);
  }
  if (role.server) {
    split.reset();
    serve_and_exit(ps_store, info, role, options_.job);
  }
  worker_index_ = role.index;
  num_workers_ = role.num_workers;
  workers_comm_ = std::move(split);
  COHORT_CHECK(workers_comm_ && workers_comm_->rank() == worker_index_ && workers_comm_->size() == num_workers_)
      << "parameter_server: the workers' group came out of split with the wrong rank or size";
  engine::EngineOptions eo;
  eo.label = "ps_workers";
  engine_ = std::make_unique<engine::Engine>(
      workers_comm_, std::make_shared<rendezvous::PrefixStore>(ns + "/engine", world), eo);
  worker_ = std::make_unique<ps::Worker>(
      std::move(ps_store),
      ps::WorkerOptions{.worker = role.index, .num_workers = role.num_workers, .num_servers = role.num_servers,
                        .job = options_.job, .secret = info.secret});
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

std::string ParameterServerStrategy::spec() const {
  const ps::JobOptions& j = options_.job;
  std::string s = "parameter_server:optimizer=" +
                  std::string(options_.program_optimizer ? "program" : ps::update_rule_name(j.optimizer.rule)) +
                  ",servers=" + std::to_string(j.servers) +
                  ",staleness=" + (j.staleness == ps::kAsync ? std::string("async") : std::to_string(j.staleness));
  if (j.backup_workers) s += ",backup_workers=" + std::to_string(j.backup_workers);
  return s;
}

int ParameterServerStrategy::replicas_in_sync() const { return num_workers_; }
int ParameterServerStrategy::process_count() const { return num_workers_; }
int ParameterServerStrategy::process_index() const { return worker_index_; }

void ParameterServerStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  torch::nn::Module& module = *model_.module;
  optimizer_ = detail::make_optimizer(model_, module.parameters());
  // Worker 0's parameters and buffers (BatchNorm statistics stay on the
  // workers) everywhere; ShardedTraining declares worker 0's on the servers.
  broadcast_parameters(module, 0, engine_.get());
  ShardedTrainingOptions o;
  o.dense = options_.job.hybrid           ? DenseMode::hybrid
            : options_.program_optimizer ? DenseMode::summation
                                         : DenseMode::servers;
  o.worker_engine = engine_.get();
  training_ = std::make_unique<ShardedTraining>(*worker_, module, o);
  broadcast_optimizer_state(*optimizer_, 0, engine_.get());
  stale_ = true;  // nothing pulled yet
  prepared_ = true;
}

void ParameterServerStrategy::pull_if_stale() {
  // Only with the optimizer on the servers are the workers' values behind.
  if (!stale_ || !training_ || training_->dense_mode() != DenseMode::servers) return;
  training_->pull();
  stale_ = false;
}

torch::nn::Module& ParameterServerStrategy::module() {
  detail::prepared(model_, prepared_);
  pull_if_stale();
  return *model_.module;
}

torch::optim::Optimizer& ParameterServerStrategy::optimizer() {
  detail::prepared(model_, prepared_);
  return *optimizer_;
}

StepResult ParameterServerStrategy::train_step(const Batch& mine, int64_t global_rows) {
  detail::prepared(model_, prepared_);
  COHORT_CHECK_AS(ConfigError, global_rows > 0 && mine.rows() <= global_rows)
      << "parameter_server: a step of " << global_rows << " global rows cannot hold this worker's " << mine.rows();
  StepResult result{.rows = mine.rows()};
  zero_grad_to_none(*optimizer_);
  training_->begin_step();
  stale_ = false;
  // The servers (or the hybrid allreduce) average the workers' gradients:
  // weighted by its share of the rows, a worker's mean loss makes that
  // average the global batch's mean-loss gradient.
  const at::Tensor loss = detail::data_parallel_loss(model_, mine, global_rows, num_workers_, result);
  loss.backward();
  training_->end_step(optimizer_.get());
  stale_ = training_->dense_mode() == DenseMode::servers;
  return result;
}

at::Tensor ParameterServerStrategy::predict(const at::Tensor& input) {
  detail::prepared(model_, prepared_);
  pull_if_stale();
  torch::NoGradGuard no_grad;
  return model_.forward(*model_.module, input);
}

at::Tensor ParameterServerStrategy::all_sum(const at::Tensor& values) {
  return allreduce(values, {.op = ReduceOp::sum, .engine = engine_.get()});
}

at::Tensor ParameterServerStrategy::all_gather(const at::Tensor& rows) {
  return allgather(rows, {.engine = engine_.get()});
}

void ParameterServerStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::save_replicated(module(), optimizer(), archive);
}

void ParameterServerStrategy::load(torch::serialize::InputArchive& archive) {
  COHORT_CHECK_AS(ConfigError, options_.program_optimizer && !options_.job.hybrid)
      << "parameter_server: with the optimizer on the servers (or hybrid), a checkpoint of the strategy lacks "
         "the servers' state; restore through checkpoint_dir (ps::Worker::save) instead";
  detail::load_replicated(module(), optimizer(), archive);
  // The servers only sum gradients in this mode: the loaded values are the
  // workers' (every worker loads the same archive), nothing to send.
}

}  // namespace cohort
