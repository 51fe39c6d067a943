// Strategy: the one seam between a training program and how it is
// distributed (TensorFlow's tf.distribute.Strategy, for LibTorch).
//
// A program builds its model, loss and optimizer once and hands them to a
// strategy; the strategy decides where the replicas are (one device, several
// threads of one process, one per rank across processes and hosts, ...),
// wraps the model and the optimizer for that, runs a training step on this
// process's part of a global batch, and combines values across processes.
// fit() (cohort/torch/fit) drives any strategy; so can a hand-written loop:
//
//   auto strategy = cohort::make_strategy("multi_worker:style=horovod");  // core/strategy_registry.h
//   strategy->prepare({.module = net, .forward = ..., .loss = ..., .optimizer = ...});
//   for (...) {
//     cohort::Batch mine = ...;                        // this process's rows of the global batch
//     int64_t rows = strategy->all_sum(...);           // the rows of the whole step
//     strategy->train_step(mine, rows);
//   }
//
// The class has two parts, as TensorFlow splits Strategy from
// StrategyExtended and c10d ProcessGroup from Backend:
// - the public interface, what programs and fit() call: non-virtual, it
//   checks the call once (prepared, rows in range) and runs the hooks;
// - the protected hooks (do_*), what a strategy provides. Optional
//   capabilities are objects behind queries (sharded_checkpoints(),
//   elastic(), batch_sampler()): null where a strategy has none, instead of
//   virtual functions that throw.
// A strategy makes itself known to make_strategy() by registering its name,
// spec schema and factory from its own file (core/strategy_registry.h).
//
// This header is the interface only; the strategies live in
// cohort/torch/strategy/ (one_device, mirrored, central_storage,
// multi_worker, zero, parameter_server) and in the areas that add theirs
// (the private strategy in privacy/), which is why it sits in core/: every
// area may implement it without depending on the others.
//
// Contracts every strategy keeps:
// - Replicas and processes. replicas_in_sync() replicas train in lock step;
//   this process runs local_replicas() of them. Processes that hold replicas
//   are numbered process_index() in [0, process_count()); the chief
//   (process 0) is the one that prints and writes files.
// - The global batch. A step's global batch of R rows is split over the
//   replicas in order, as InputContext::rows_of() splits rows: the first
//   R % n replicas get one row more. A process passes train_step() the rows
//   of its replicas, contiguous, and the global row count R, which the
//   processes agree on first (all_sum of their rows); a process may have 0
//   rows in a step (an uneven tail) and must still call train_step(), which
//   then contributes nothing but keeps the collectives in step. Nothing is
//   ever padded with duplicate rows.
// - Numbers. train_step() leaves the model as one device would after one
//   optimizer step on the concatenated global batch, with a loss function
//   that averages over the rows it is given: the gradient applied is the
//   gradient of the global batch's mean loss, whatever the split.
// - Values across processes: all_sum() adds tensors of the same shape and
//   dtype over the processes (float64 metric states, row counts and votes;
//   the private strategy's float32 or float64 gradient sums), in the same
//   call order on every process.
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/core/input_context.h"
#include "cohort/torch/core/optimizer_factory.h"
#include "cohort/torch/core/tensor_handle.h"
#include "cohort/torch/core/training_state.h"

namespace cohort {

namespace engine {
class Engine;
}
class ElasticShards;  // core/elastic_state.h

// A batch of rows: dim 0 of input and target (when defined) is the row.
struct Batch {
  at::Tensor input;
  at::Tensor target;
  int64_t rows() const { return input.defined() ? input.size(0) : 0; }
};

// The training loss of a batch: a mean over the rows of (output, target).
// A loss module converts (torch::nn::CrossEntropyLoss(), ...: module holders
// are callable with (output, target)).
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;
// Runs the model's forward on `input` (type-erased: the strategy holds
// modules as torch::nn::Module).
using ForwardFn = std::function<at::Tensor(torch::nn::Module& module, const at::Tensor& input)>;

// What a strategy trains, as the program built it.
struct TrainingModel {
  std::shared_ptr<torch::nn::Module> module;  // the program's model: replica 0
  ForwardFn forward;
  LossFn loss;
  OptimizerFactory optimizer;
  // `forward` is the module's own forward (training_model() says so): a
  // strategy may then run a torch::nn::Sequential layer by layer instead.
  bool module_forward = false;
};

// Makes a TrainingModel from a module holder (torch::nn::Sequential, or a
// TORCH_MODULE type), whose forward takes one tensor.
template <typename ModuleHolder>
TrainingModel training_model(ModuleHolder module, LossFn loss, OptimizerFactory optimizer) {
  using Impl = typename ModuleHolder::ContainedType;
  return {module.ptr(),
          // dynamic_cast: Module is a virtual base of the module types.
          [](torch::nn::Module& m, const at::Tensor& x) -> at::Tensor { return dynamic_cast<Impl&>(m).forward(x); },
          std::move(loss), std::move(optimizer), /*module_forward=*/true};
}

// What one train_step did on this process.
struct StepResult {
  double loss_sum = 0;  // sum over this process's rows of the per-row loss (mean loss x rows)
  int64_t rows = 0;     // this process's rows
  at::Tensor output;    // this process's outputs, detached, rows in batch order (metrics read them)
};

// Where a strategy's replicas are (the numbers of the contract above).
struct ReplicaPlacement {
  int replicas_in_sync = 1;
  int local_replicas = 1;
  int process_count = 1;
  int process_index = 0;
};

// What a training run will do, as fit() knows it before the first step
// (Strategy::begin_training()). A strategy that calibrates itself to the
// run (a private strategy given a privacy budget: its sampling rate and
// noise) reads it; the others ignore it.
struct TrainingPlan {
  int64_t dataset_size = 0;       // rows in one epoch of the training input, over all processes
  int64_t global_batch_size = 0;  // rows of one step, over all replicas
  int64_t epochs = 0;             // of this run (a resumed run: all of them, done ones included)
};

// Each step's rows, for a strategy that chooses them itself instead of
// fit()'s shuffled global batches of fixed size (DP-SGD samples every
// example independently at every step). The rows of a step are a function of
// the step alone, so a resumed run, at any process count, continues the same
// sequence.
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  // Steps that make one epoch of a data set of `dataset_size` rows.
  virtual int64_t steps_per_epoch(int64_t dataset_size) const = 0;
  // This process's rows (int64 indices into the data set, 1-D, possibly
  // empty) of training step `step`, counted from the start of training.
  // fit() still agrees on the step's global row count (all_sum) and calls
  // train_step() even when no process has a row.
  virtual at::Tensor process_rows(int64_t dataset_size, int64_t step) const = 0;
};

// Capability: the strategy's checkpoints can be sharded (checkpoint/
// sharded_checkpoint.h): every process writes its own part into a directory,
// so that none holds the whole state, and reads any sharded save back.
class ShardedCheckpoints {
 public:
  // Whether the strategy's state is split over its processes (zero), so
  // that fit()'s checkpoint callbacks save through save_sharded(); false
  // for a strategy that reads sharded saves into its whole model (a
  // job resumed under multi_worker from zero's backup).
  virtual bool saves_sharded() const = 0;
  // Collective: a sharded save into `dir` (with `state` recorded); returns
  // the save's id.
  virtual std::string save_sharded(const std::string& dir, const TrainingState& state = {}) = 0;
  // Collective: the state of save `id` in `dir` (empty: the save in force,
  // else it or the one before it); returns the recorded TrainingState.
  virtual TrainingState load_sharded(const std::string& dir, const std::string& id = "") = 0;

 protected:
  ~ShardedCheckpoints() = default;
};

// Capability: the strategy follows an elastic job's membership (cohortrun
// --min-np, core/elastic_state.h): its processes are the world's ranks and
// its state is replicated (or committed in parts), so that fit() goes on
// after a member is lost or admitted.
class ElasticTraining {
 public:
  // After cohort::reform() replaced the world: builds again what prepare()
  // built over the old one (its hold on the engine, DDP's buckets, gradient
  // hooks), keeping the module and the optimizer with their state.
  // Collective over the new world, with the same collectives as prepare()'s,
  // which a new member runs meanwhile. It need not hand the state around
  // (nor a joining process's prepare()): run_elastic() syncs the newest
  // commit to every member right after.
  virtual void rejoin() = 0;
  // A strategy whose state is split over its processes (zero) commits and
  // restores it through this (ElasticState::shard()); null: the module and
  // optimizer are replicated and ElasticState keeps them itself. Each call
  // starts a new training's commits.
  virtual ElasticShards* elastic_shards() { return nullptr; }
  // The engine over the processes that train, when the world holds others
  // too (parameter_server: its servers take part in the membership, not in
  // training's state): ElasticState makes its collectives there. Null: the
  // world's engine.
  virtual engine::Engine* elastic_group() { return nullptr; }
  // What the strategy keeps beyond the module and the optimizer that a
  // rolled-back step must roll back too (a private strategy's accountant
  // and step count), as bytes, the same on every process at a step
  // boundary: an elastic fit commits it with them and restores it with
  // load_own_state(), both on every process at the same point (a commit, a
  // sync), so they may make collectives on the strategy's own group; and
  // own_state() may make the state durable where it lives
  // (parameter_server's servers keep a commit of theirs). Default: nothing.
  virtual std::string own_state() const { return {}; }
  // Default: ConfigError unless `bytes` is empty.
  virtual void load_own_state(const std::string& bytes);

 protected:
  ~ElasticTraining() = default;
};

class Strategy {
 public:
  Strategy() = default;
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // --- Identity and placement.
  // The strategy as a spec that make_strategy() accepts, with every key
  // (defaults included): "multi_worker:bucket_mb=25,...,style=ddp".
  std::string spec() const { return do_spec(); }
  // One line for the start of training: the spec, and what the strategy
  // chose for this model (a private strategy: its per-sample gradient path).
  std::string description() const { return do_description(); }
  ReplicaPlacement placement() const { return do_placement(); }
  int replicas_in_sync() const { return placement().replicas_in_sync; }
  int local_replicas() const { return placement().local_replicas; }
  int process_count() const { return placement().process_count; }
  int process_index() const { return placement().process_index; }
  bool is_chief() const { return process_index() == 0; }
  // What an input reading for this strategy needs (core/input_context.h).
  InputContext input_context(int64_t global_batch_size = 0) const;

  // --- Roles.
  // Whether this process serves the others instead of training
  // (parameter_server's servers, as ps-lite's IsServer()). Such a process's
  // program serves and trains nothing (prepare() refuses):
  //   if (strategy->is_server()) return strategy->serve();
  bool is_server() const { return do_is_server(); }
  // Serves until the job's training is over; returns the process's exit
  // status (0: served until the trainers finished). ConfigError on a
  // process that trains.
  int serve();

  // --- The model.
  // Takes the model, wraps it and makes the optimizer (collective where the
  // strategy communicates: every process calls it). Once per strategy;
  // ConfigError naming what `model` lacks, or on a server.
  void prepare(TrainingModel model);
  bool prepared() const { return prepared_; }
  // The program's module (replica 0) and the optimizer the strategy made
  // (its param groups carry the learning rate that schedules set).
  // ConfigError before prepare().
  torch::nn::Module& module();
  torch::optim::Optimizer& optimizer();

  // --- Training.
  // What the run will do, before its first step (fit() calls it; a
  // hand-written loop whose strategy calibrates itself calls it too).
  void begin_training(const TrainingPlan& plan);
  // One training step on this process's rows `mine` of a global batch of
  // `global_rows` rows (see the file comment). Collective. A process with
  // no rows in a step whose even split would give it some is warned about
  // once (a loop that ran past its shard of the data).
  StepResult train_step(const Batch& mine, int64_t global_rows);
  // The model's output for `input` without gradients, computed by this
  // process alone (parameters are in sync between steps). The module's
  // train/eval mode is the caller's.
  at::Tensor predict(const at::Tensor& input);

  // --- Values across processes.
  // Sum over processes of a floating-point tensor (same shape and dtype
  // everywhere; may return `values` itself when there is one process).
  // Collective, in the same order on every process.
  at::Tensor all_sum(const at::Tensor& values) { return do_all_sum(values); }
  // all_sum() started now and finished by the handle's wait(), so that a
  // caller can overlap it with a step (fit()'s per-step vote rides along
  // with the step's gradient traffic). Same ordering rule as all_sum(): the
  // calls, not the waits, must come in one order on every process.
  TensorHandle all_sum_async(const at::Tensor& values) { return do_all_sum_async(values); }
  // Every process's rows concatenated along dim 0, process 0's first (dim 0
  // may differ). Collective.
  at::Tensor all_gather(const at::Tensor& rows) { return do_all_gather(rows); }

  // --- Checkpoints.
  // The model and optimizer state as the strategy holds them: save() on the
  // process(es) that write; load() on every process, each given the same
  // archive (fit() broadcasts the chief's bytes). Replicated strategies
  // save the chief's copy.
  void save(torch::serialize::OutputArchive& archive);
  void load(torch::serialize::InputArchive& archive);

  // --- Optional capabilities (null: the strategy has none).
  ShardedCheckpoints* sharded_checkpoints() { return do_sharded_checkpoints(); }
  ElasticTraining* elastic() { return do_elastic(); }
  // The sampler that chooses each training step's rows, or null for fit()'s
  // fixed-size global batches (every strategy but a private one).
  const BatchSampler* batch_sampler() const { return do_batch_sampler(); }

  // Values the strategy reports with fit()'s epoch logs, the same on every
  // process (a private strategy's privacy budget spent: "epsilon").
  std::map<std::string, double> logs() { return do_logs(); }

  // --- Failure.
  // Tells the strategy's other processes that this one stops with `reason`:
  // their pending and next collectives fail with it at once instead of
  // waiting for this process until a timeout. fit() calls it when an
  // exception escapes it, so that a program's catch need not. Nothing
  // happens where nothing communicates; never throws.
  void abort(const std::string& reason) noexcept;

 protected:
  // What a strategy provides. The public functions above have checked the
  // call before a hook runs: the model is prepared (all but do_prepare),
  // rows are in range, predict() runs without gradients.
  virtual std::string do_spec() const = 0;
  virtual ReplicaPlacement do_placement() const = 0;
  // prepare()'s work; the model is model() (checked complete).
  virtual void do_prepare() = 0;
  virtual torch::nn::Module& do_module() { return *model_.module; }
  virtual torch::optim::Optimizer& do_optimizer() = 0;
  virtual StepResult do_train_step(const Batch& mine, int64_t global_rows) = 0;
  // Default: the module's forward.
  virtual at::Tensor do_predict(const at::Tensor& input);
  virtual at::Tensor do_all_sum(const at::Tensor& values) = 0;
  // Default: do_all_sum() at once, for strategies with no collective to
  // overlap.
  virtual TensorHandle do_all_sum_async(const at::Tensor& values);
  virtual at::Tensor do_all_gather(const at::Tensor& rows) = 0;
  // Default, for replicated strategies: module() and optimizer() in
  // core/replicated_state.h's form.
  virtual void do_save(torch::serialize::OutputArchive& archive);
  virtual void do_load(torch::serialize::InputArchive& archive);
  virtual void do_begin_training(const TrainingPlan& plan) {}
  virtual std::string do_description() const { return spec(); }
  virtual ShardedCheckpoints* do_sharded_checkpoints() { return nullptr; }
  virtual ElasticTraining* do_elastic() { return nullptr; }
  virtual const BatchSampler* do_batch_sampler() const { return nullptr; }
  virtual std::map<std::string, double> do_logs() { return {}; }
  // Default: nothing to tell (one process).
  virtual void do_abort(const std::string& reason) {}
  // Default: every process trains, none serves.
  virtual bool do_is_server() const { return false; }
  virtual int do_serve();

  // The model prepare() was given (empty before).
  const TrainingModel& model() const { return model_; }
  // ConfigError naming `call` before prepare(): for a strategy's own public
  // functions beyond this interface.
  void require_prepared(const char* call) const;
  // The optimizer over `parameters`, made by the program's factory
  // (ConfigError when it returns none).
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& parameters) const;

 private:
  TrainingModel model_;
  bool prepared_ = false;
  std::atomic<bool> warned_empty_step_{false};
};

}  // namespace cohort
