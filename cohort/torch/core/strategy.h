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
//   auto strategy = cohort::make_strategy("multi_worker:style=horovod");  // strategy/
//   strategy->prepare({.module = net, .forward = ..., .loss = ..., .optimizer = ...});
//   for (...) {
//     cohort::Batch mine = ...;                        // this process's rows of the global batch
//     auto [rows, stop] = ... strategy->all_sum(...);  // the rows of the whole step
//     strategy->train_step(mine, global_rows);
//   }
//
// This header is the interface only; the strategies themselves live in
// cohort/torch/strategy/ (one_device, mirrored, multi_worker,
// central_storage) and in the areas that add theirs (parameter servers,
// ZeRO, differential privacy), which is why it sits in core/: every area may
// implement it without depending on the others.
//
// Contracts every strategy keeps:
// - Replicas and processes. replicas_in_sync() replicas train in lock step;
//   this process runs local_replicas() of them. Processes that hold replicas
//   are numbered process_index() in [0, process_count()); the chief
//   (process 0) is the one that prints and writes files.
// - The global batch. A step's global batch of R rows is split over the
//   replicas in order, as reduce_scatter_block() (collectives.h) splits
//   rows: the first R % n replicas get one row more. A process
//   passes train_step() the rows of its replicas, contiguous, and the global
//   row count R, which the processes agree on first (all_sum of their rows);
//   a process may have 0 rows in a step (an uneven tail) and must still call
//   train_step(), which then contributes nothing but keeps the collectives
//   in step. Nothing is ever padded with duplicate rows.
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

#include "cohort/common/check.h"
#include "cohort/torch/core/tensor_handle.h"
#include "cohort/torch/core/training_state.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;
// Runs the model's forward on `input` (type-erased: the strategy holds
// modules as torch::nn::Module).
using ForwardFn = std::function<at::Tensor(torch::nn::Module& module, const at::Tensor& input)>;
// Makes the optimizer over `parameters` (strategies decide which: all of
// them, a shard, none on this process).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& parameters)>;

// An OptimizerFactory for a torch::optim optimizer and its options:
//   optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))
template <typename Optimizer, typename Options>
OptimizerFactory optimizer_factory(Options options) {
  return [options](const std::vector<at::Tensor>& parameters) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<Optimizer>(parameters, options);
  };
}

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

class Strategy {
 public:
  virtual ~Strategy() = default;

  // The strategy as a spec that make_strategy() accepts, with every key
  // (defaults included): "multi_worker:style=ddp".
  virtual std::string spec() const = 0;

  virtual int replicas_in_sync() const = 0;
  virtual int local_replicas() const = 0;
  virtual int process_count() const = 0;
  virtual int process_index() const = 0;
  bool is_chief() const { return process_index() == 0; }

  // Takes the model, wraps it and makes the optimizer (collective where the
  // strategy communicates: every process calls it). Once per strategy.
  virtual void prepare(TrainingModel model) = 0;
  bool prepared() const { return prepared_; }

  // The program's module (replica 0) and the optimizer the strategy made
  // (its param groups carry the learning rate that schedules set).
  virtual torch::nn::Module& module() = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;

  // One training step on this process's rows `mine` of a global batch of
  // `global_rows` rows (see the file comment). Collective.
  virtual StepResult train_step(const Batch& mine, int64_t global_rows) = 0;

  // The model's output for `input` without gradients, computed by this
  // process alone (parameters are in sync between steps). The module's
  // train/eval mode is the caller's.
  virtual at::Tensor predict(const at::Tensor& input) = 0;

  // Sum over processes of a floating-point tensor (same shape and dtype
  // everywhere; may return `values` itself when there is one process).
  // Collective, in the same order on every process.
  virtual at::Tensor all_sum(const at::Tensor& values) = 0;
  // all_sum() started now and finished by the handle's wait(), so that a
  // caller can overlap it with a step (fit()'s per-step vote rides along
  // with the step's gradient traffic). Same ordering rule as all_sum(): the
  // calls, not the waits, must come in one order on every process. The
  // default is all_sum() done at once, for strategies that have no
  // collective to overlap.
  virtual TensorHandle all_sum_async(const at::Tensor& values);
  // Every process's rows concatenated along dim 0, process 0's first (dim 0
  // may differ). Collective.
  virtual at::Tensor all_gather(const at::Tensor& rows) = 0;

  // The model and optimizer state as the strategy holds them, for
  // checkpoints: save() on the process(es) that write; load() on every
  // process, each given the same archive (fit() broadcasts the chief's
  // bytes). Replicated strategies save the chief's copy.
  virtual void save(torch::serialize::OutputArchive& archive) = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;

  // Strategies whose state is split over the processes (zero) save it
  // sharded instead (checkpoint/sharded_checkpoint.h): every process writes
  // its own part into `dir`, so that none holds the whole; fit()'s
  // checkpoint callbacks use these when sharded_checkpoints() says so.
  virtual bool sharded_checkpoints() const { return false; }
  // Collective: a sharded save into `dir` (with `state` recorded); returns
  // the save's id. Default: ConfigError.
  virtual std::string save_sharded(const std::string& dir, const TrainingState& state = {});
  // Collective: the state of save `id` in `dir` (empty: the save in force,
  // else it or the one before it); returns the recorded TrainingState.
  virtual TrainingState load_sharded(const std::string& dir, const std::string& id = "");

  // The sampler that chooses each training step's rows, or null for fit()'s
  // fixed-size global batches (every strategy but a private one).
  virtual const BatchSampler* batch_sampler() const { return nullptr; }
  // Elastic jobs (cohortrun --min-np, core/elastic_state.h). Whether the
  // strategy follows the job's membership: its processes are the world's
  // ranks and its state is replicated, so that fit() can go on after a
  // member is lost or admitted. rejoin(), after cohort::reform() replaced
  // the world: builds again what prepare() built over the old one (its hold
  // on the engine, DDP's buckets, gradient hooks), keeping the module and
  // the optimizer with their state. Collective over the new world, with the
  // same collectives as prepare()'s, which a new member runs meanwhile. It
  // need not hand the state around (nor a joining process's prepare()):
  // run_elastic() syncs the newest commit to every member right after.
  // Default: no, and rejoin() is a ConfigError.
  virtual bool follows_membership() const { return false; }
  virtual void rejoin();
  // The ones that do, for the errors that say so.
  static constexpr const char* kStrategiesThatFollowMembership =
      "multi_worker, zero, parameter_server (synchronous, without backup workers), and a private strategy over "
      "multi_worker with designated noise";
  // A strategy whose state is split over its processes (zero) commits and
  // restores it through this (ElasticState::shard()); null: the module and
  // optimizer are replicated and ElasticState keeps them itself. Each call
  // starts a new training's commits: the object returned before, and its
  // commits, are gone.
  virtual ElasticShards* elastic_shards() { return nullptr; }
  // The engine over the processes that train, when the world holds others
  // too (parameter_server: its servers take part in the membership, not in
  // training's state): an elastic fit's ElasticState makes its collectives
  // there. Null: the world's engine.
  virtual engine::Engine* elastic_group() { return nullptr; }
  // What the strategy keeps beyond the module and the optimizer that a
  // rolled-back step must roll back too (a private strategy's privacy
  // accountant and step count), as bytes, the same on every process at a
  // step boundary: an elastic fit commits it with them and restores it with
  // load_own_state(), both on every process at the same point (a commit, a
  // sync), so they may make collectives on the strategy's own group; and
  // own_state() may make the state durable where it lives (parameter_server's
  // servers keep a commit of theirs). Default: nothing.
  virtual std::string own_state() const { return {}; }
  virtual void load_own_state(const std::string& bytes);

  // Values the strategy reports with fit()'s epoch logs, the same on every
  // process (a private strategy's privacy budget spent: "epsilon").
  virtual std::map<std::string, double> logs() { return {}; }

 protected:
  bool prepared_ = false;
};

inline std::string Strategy::save_sharded(const std::string&, const TrainingState&) {
  COHORT_THROW(ConfigError) << "the " << spec() << " strategy does not save sharded checkpoints";
}

inline TrainingState Strategy::load_sharded(const std::string&, const std::string&) {
  COHORT_THROW(ConfigError) << "the " << spec() << " strategy does not load sharded checkpoints";
}

inline void Strategy::rejoin() {
  COHORT_THROW(ConfigError) << "the " << spec() << " strategy cannot follow an elastic job's membership changes ("
                            << kStrategiesThatFollowMembership << " can)";
}

inline void Strategy::load_own_state(const std::string& bytes) {
  COHORT_CHECK_AS(ConfigError, bytes.empty())
      << "the " << spec() << " strategy keeps no state of its own, and was given " << bytes.size() << " bytes of it";
}

inline TensorHandle Strategy::all_sum_async(const at::Tensor& values) {
  at::Tensor sum = all_sum(values);
  return TensorHandle({.name = "all_sum", .finish = [sum] { return sum; }});
}

}  // namespace cohort
