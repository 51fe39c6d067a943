// Model: Keras's fit(), evaluate() and predict() for a LibTorch module,
// distributed by any Strategy. The training code is the same whether the
// strategy is one device, several threads or many hosts:
//
//   auto strategy = cohort::make_strategy(flags.strategy);
//   cohort::Model model(*strategy, net, {
//       .loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); },
//       .optimizer = cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1)),
//       .metrics = {cohort::accuracy()}});
//   cohort::History history = model.fit(train, {
//       .epochs = 2, .batch_size = 128, .validation_data = &test,
//       .callbacks = {cohort::progress_bar(), cohort::backup_and_restore("backup/")}});
//
// How fit() runs an epoch (the contract tests check):
// - Data order: the rows of `train` are permuted by (seed, epoch) (or kept
//   in order without shuffle) and cut into global batches of batch_size
//   rows; the last may be smaller. Each global batch is split over the
//   replicas in order (core/strategy.h), so every row is trained on exactly
//   once per epoch, by exactly one replica, whatever the number of ranks,
//   and nothing is padded. The result equals training on one device with
//   the same global batches (up to floating-point summation order).
//   A strategy with a BatchSampler (core/strategy.h: a private strategy's
//   Poisson sampling) chooses each step's rows instead, and sets the
//   epoch's steps; batch_size is then unused; a sampled step with no rows
//   anywhere is still a step (DP-SGD releases its noise).
// - Agreement: a tiny asynchronous vote [stop requests, preemption
//   requests] is cast as a voting step k starts, runs beside the steps'
//   compute and is read before the next voting step, k + n, where n makes
//   votes about FitOptions::vote_interval_s apart (0.2 s by default) at the
//   chief's measured step time; every rank reads the same vote, so all
//   derive the same n. A request (stop_training() in a batch callback, a
//   signal) thus ends training on every rank alike at one step boundary,
//   within about two intervals, and no step waits for it. With
//   vote_interval_s = 0 every step votes: a request made during step k - 1
//   ends training after step k. (An input that cannot tell a step's global
//   rows alone, a BatchStream whose next_global_rows() is nullopt, votes on
//   its rows, stops and preemption before each step instead, blocking.)
//   At epoch end one more collective merges the metric states and agrees on
//   stopping and on the chief's learning rate.
// - Preemption: while fit() runs, SIGTERM and SIGINT are caught; the ranks
//   agree on a step boundary (the vote's: within about two vote intervals), call on_preemption() (BackupAndRestore saves there), and fit()
//   returns a History with preempted() true. The program should then exit
//   with kPreemptedExitCode; its next launch resumes at that step.
// - Elastic jobs (cohortrun --min-np, core/elastic_state.h): when the
//   strategy follows the membership (multi_worker; zero, whose blocks are
//   committed as parts with copies; a private strategy over multi_worker
//   with designated noise),
//   fit() commits its state in memory every elastic_commit_steps steps,
//   after their batch-end callbacks, and at every epoch's end: the model
//   and optimizer, the strategy's own state (Strategy::own_state(): a
//   private strategy's accountant), the epoch's metric sums over every
//   member, the position, the history, the callbacks' states
//   (save_state()) and the input's cursor (an input pipeline's). A lost member: the survivors
//   form a new world, the strategy rejoins it, and every member goes on from
//   the newest commit, redoing the steps after it (their callbacks run
//   again; random draws during them differ). A replacement is admitted at
//   the next commit and handed the state before its first step (it does
//   not run the callbacks' restore()). Since the global batches are the
//   same at any world size, no row is skipped or trained twice and the
//   result is one device's. Batch-end logs are the epoch's sums over every
//   member at the last commit plus this member's since. A member that host
//   discovery removes returns from fit() at the commit where it leaves,
//   with the history so far and without on_train_end(); it then has no
//   world (cohort::initialized() is false). Limits: the program runs no
//   collective of its own between init() and its first fit() (a process
//   joining would run it alone); over a PipelineInput, every world size the
//   job may take divides the global batch (else start_epoch() refuses the
//   new world and the job ends).
#pragma once

#include <ATen/Tensor.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/core/batch_stream.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/dataset.h"
#include "cohort/torch/fit/history.h"
#include "cohort/torch/fit/metric.h"

namespace cohort {

class ElasticState;

// The exit code of a program whose fit() was preempted (BSD's EX_TEMPFAIL:
// try again later).
inline constexpr int kPreemptedExitCode = 75;

struct ModelOptions {
  LossFn loss;                  // a mean over the rows it is given
  OptimizerFactory optimizer;
  std::vector<std::shared_ptr<Metric>> metrics;
};

struct FitOptions {
  int64_t epochs = 1;
  int64_t batch_size = 32;           // global: over all replicas of all processes
  int64_t steps_per_epoch = 0;       // 0: as many as the data gives; else at most this many
  const Dataset* validation_data = nullptr;
  int64_t validation_freq = 1;       // validate after every k-th epoch
  int64_t validation_batch_size = 0; // 0: batch_size
  bool shuffle = true;
  uint64_t seed = 0;                 // the data order is a function of (seed, epoch)
  bool catch_preemption = true;      // SIGTERM/SIGINT: agree, call on_preemption, return
  // Seconds between the processes' votes on stop and preemption requests
  // (Model::fit says how); < 0: COHORT_FIT_VOTE_INTERVAL_S (0.2); 0: every step.
  double vote_interval_s = -1;
  std::vector<std::shared_ptr<Callback>> callbacks;
  // Elastic jobs (cohortrun --min-np; the file comment): commit the state
  // in memory every this many steps and at every epoch's end. A member lost
  // between commits makes every member redo the steps since the last one.
  int64_t elastic_commit_steps = 1;
};

struct EvaluateOptions {
  int64_t batch_size = 256;  // global
  std::vector<std::shared_ptr<Callback>> callbacks;
};

// Where a fit stands: the next step to run.
struct FitPosition {
  int64_t epoch = 0;            // the epoch in progress (0-based)
  int64_t batch = 0;            // steps of that epoch done
  int64_t step = 0;             // steps since the start of training
  int64_t epochs = 0;           // of this fit
  int64_t steps_per_epoch = 0;  // of this fit's training data (the last epoch's may be cut by a stop)
};

class Model {
 public:
  // `module` is a module holder (torch::nn::Sequential, a TORCH_MODULE type)
  // whose forward takes one tensor. Prepares the strategy (collective).
  template <typename ModuleHolder>
  Model(Strategy& strategy, ModuleHolder module, ModelOptions options)
      : Model(strategy, training_model(std::move(module), options.loss, options.optimizer),
              std::move(options.metrics)) {}
  Model(Strategy& strategy, TrainingModel model, std::vector<std::shared_ptr<Metric>> metrics);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Trains; collective. Returns the per-epoch logs. A run that a
  // BackupAndRestore callback resumes continues its history.
  History fit(const Dataset& train, FitOptions options = {});
  // Trains on a stream that orders, shards and resumes itself (an input
  // pipeline: cohort/torch/data/pipeline_input.h); `options.shuffle` and
  // `seed` do not apply, the stream's own order does. Its state() goes into
  // save_fit_state(), so BackupAndRestore resumes it exactly once, with the
  // same or another number of processes. The stream must outlive the call.
  History fit(BatchStream& train, FitOptions options = {});
  // The loss and metrics over `data`, merged over the processes (each
  // evaluates a contiguous share); collective.
  Logs evaluate(const Dataset& data, EvaluateOptions options = {});
  // The outputs for every row of `data`, in order, on every process (each
  // computes a share, then they are gathered); collective.
  at::Tensor predict(const Dataset& data, int64_t batch_size = 256);

  // For callbacks and programs.
  Strategy& strategy() { return strategy_; }
  torch::nn::Module& module() { return strategy_.module(); }
  torch::optim::Optimizer& optimizer() { return strategy_.optimizer(); }
  bool is_chief() const { return strategy_.is_chief(); }
  // The first param group's learning rate; set_learning_rate sets every
  // group's (agreed at epoch end: the chief's wins).
  double learning_rate();
  void set_learning_rate(double lr);
  // Asks every rank to stop at the next agreed step boundary (see the file
  // comment).
  void stop_training() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }
  const FitPosition& position() const { return position_; }
  const FitOptions& fit_options() const { return fit_options_; }
  const History& history() const { return history_; }

  // Everything a resumed fit() needs to continue bit for bit: the
  // strategy's model and optimizer state, the position, the partial epoch's
  // metric states, the history, the callbacks' states and every process's
  // LibTorch random generator. save_fit_state() is collective (the chief's
  // archive is the one written); load_fit_state() on every process with the
  // same archive, from a callback's restore() (fit() then continues from
  // it) or before fit(). A strategy that saves sharded
  // (Strategy::sharded_checkpoints(): zero) writes its state into `shards`,
  // a directory, each process its own part, and the archive names the save.
  void save_fit_state(torch::serialize::OutputArchive& archive, const std::string& shards = "");
  void load_fit_state(torch::serialize::InputArchive& archive, const std::string& shards = "");

 private:
  // What a fit's state holds besides the strategy's and the metrics:
  // position, history, callbacks' states, the stream's cursor.
  struct Progress {
    int64_t epoch = 0, batch = 0, step = 0;
    CallbackState history;
    std::map<std::string, CallbackState> callbacks;
    std::string stream;
  };
  void write_progress(torch::serialize::OutputArchive& archive) const;
  // Reads all before anything changes: a bad archive leaves the model as it was.
  Progress parse_progress(torch::serialize::InputArchive& archive) const;
  void put_progress(const Progress& progress);
  // The stream's epoch at position_ (its steps into position_).
  void start_epoch(BatchStream& train);
  // Epochs from position_ until the last, a stop or preemption (returned);
  // `elastic` commits each step. `last`: the last epoch's logs.
  bool run_epochs(BatchStream& train, bool epoch_started, ElasticState* elastic, Logs& last);
  Logs run_evaluation(const Dataset& data, int64_t batch_size, const std::vector<std::shared_ptr<Callback>>& callbacks,
                      const std::string& prefix);
  Logs epoch_logs(const at::Tensor& merged, const std::string& prefix) const;
  at::Tensor new_metric_state() const;
  void update_metrics(at::Tensor& state, const StepResult& step, const Batch& batch) const;

  Strategy& strategy_;
  LossFn loss_;
  std::vector<std::shared_ptr<Metric>> metrics_;
  FitOptions fit_options_;
  FitPosition position_;
  History history_;
  bool stop_requested_ = false;
  bool stopped_ = false;      // agreed at an epoch's end
  at::Tensor epoch_metrics_;  // this process's loss sum, rows and metric states for the epoch so far
  // Elastic fit: the epoch's sums over every member at the last commit
  // (epoch_metrics_ then holds this member's since); undefined otherwise.
  at::Tensor committed_metrics_;
  // Restored by load_fit_state() for fit() to continue from.
  bool resumed_ = false;
  at::Tensor resumed_epoch_metrics_;
  std::string resumed_stream_state_;
  BatchStream* stream_ = nullptr;  // the training input while fit() runs
};

}  // namespace cohort
