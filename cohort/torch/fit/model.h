// Model: Keras's fit(), evaluate() and predict() for a LibTorch module,
// distributed by any Strategy. The training code is the same whether the
// strategy is one device, several threads or many hosts; beyond plain
// LibTorch, a program writes two lines (the strategy and the Model), as a
// Keras program writes strategy.scope():
//
//   auto strategy = cohort::make_strategy(flags.strategy);
//   cohort::Model model(*strategy, net, {.loss = torch::nn::CrossEntropyLoss(),
//                                        .optimizer = torch::optim::SGDOptions(0.1),
//                                        .metrics = {cohort::accuracy()}});
//   cohort::History history = model.fit(train, {
//       .epochs = 2, .batch_size = 128, .validation_data = &test,
//       .callbacks = {cohort::progress_bar(), cohort::backup_and_restore("backup/")}});
//
// The loss is a module (torch::nn::CrossEntropyLoss()) or any function of
// (output, target) that averages over the rows; the optimizer is the
// options of one (the optimizer deduced, core/optimizer_factory.h) or a
// factory. An exception that escapes fit() has already told the other
// processes why this one stops (Strategy::abort()), so they fail at once
// instead of waiting for it.
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
//   epoch's steps; batch_size is then the expected batch; a sampled step
//   with no rows anywhere is still a step (DP-SGD releases its noise).
// - Agreement: stop requests (stop_training() on any process) and
//   preemption are agreed by a vote that runs beside the steps
//   (step_vote.h: about every FitOptions::vote_interval_s), so every rank
//   ends training at one step boundary, within about two intervals, and no
//   step waits for it. At epoch end one more collective merges the metric
//   states and agrees on stopping and on the chief's learning rate.
// - Preemption: while fit() runs, SIGTERM and SIGINT are caught; the ranks
//   agree on a step boundary, call on_preemption() (BackupAndRestore saves
//   there), and fit() returns a History with preempted() true. The program
//   should then exit with kPreemptedExitCode; its next launch resumes at
//   that step.
// - Elastic jobs (cohortrun --min-np, core/elastic_state.h): when the
//   strategy follows the membership (Strategy::elastic(): multi_worker;
//   zero, whose blocks are committed as parts with copies; a private
//   strategy over multi_worker with designated noise; parameter_server,
//   synchronous), fit() commits its state in memory every
//   elastic_commit_steps steps, after their batch-end callbacks, and at
//   every epoch's end: the model and optimizer, the strategy's own state
//   (ElasticTraining::own_state(): a private strategy's accountant), the
//   epoch's metric sums over every member, the position, the history, the
//   callbacks' states (save_state()) and the input's cursor (an input
//   pipeline's). A lost member: the survivors form a new world, the
//   strategy rejoins it, and every member goes on from the newest commit,
//   redoing the steps after it (their callbacks run again; random draws
//   during them differ). A replacement is admitted at the next commit and
//   handed the state before its first step (it does not run the callbacks'
//   restore()). Since the global batches are the same at any world size,
//   no row is skipped or trained twice and the result is one device's.
//   Batch-end logs are the epoch's sums over every member at the last
//   commit plus this member's since. A member that host discovery removes
//   returns from fit() at the commit where it leaves, with the history so
//   far and without on_train_end(); it then has no world
//   (cohort::initialized() is false). Limits: the program runs no
//   collective of its own between init() and its first fit() (a process
//   joining would run it alone); over a PipelineInput, every world size the
//   job may take divides the global batch (else start_epoch() refuses the
//   new world and the job ends).
//
// The parts (this folder's README): the epoch's steps (epoch_iterator.h)
// and their vote (step_vote.h), the callbacks' fan-out (callback_list.h),
// the metric sums (metric_states.h), the saved fit state (fit_state.cc),
// the elastic wiring (elastic_fit.cc), evaluation and prediction
// (evaluation.cc).
#pragma once

#include <ATen/Tensor.h>
#include <torch/serialize/archive.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/telemetry/rank_sample.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data/batch_stream.h"
#include "cohort/torch/data/dataset.h"
#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/callback_list.h"
#include "cohort/torch/fit/history.h"
#include "cohort/torch/fit/metric.h"
#include "cohort/torch/fit/metric_states.h"

namespace cohort {

class ElasticState;
class StepTelemetry;

// The exit code of a program whose fit() was preempted (BSD's EX_TEMPFAIL:
// try again later).
inline constexpr int kPreemptedExitCode = 75;

struct ModelOptions {
  LossFn loss;                 // a mean over the rows it is given; a loss module converts
  OptimizerFactory optimizer;  // an optimizer's options (SGDOptions, AdamOptions, ...) or a factory
  std::vector<std::shared_ptr<Metric>> metrics;
};

// What fit() validates on: an indexable Dataset, or a stream (an input
// pipeline: every process reads its own share; the stream must outlive
// fit()). Null: no validation.
struct ValidationData {
  ValidationData() = default;
  ValidationData(std::nullptr_t) {}
  ValidationData(const Dataset* dataset) : dataset(dataset) {}
  ValidationData(BatchStream* stream) : stream(stream) {}
  explicit operator bool() const { return dataset != nullptr || stream != nullptr; }

  const Dataset* dataset = nullptr;
  BatchStream* stream = nullptr;
};

struct FitOptions {
  int64_t epochs = 1;
  int64_t batch_size = 32;           // global: over all replicas of all processes
  int64_t steps_per_epoch = 0;       // 0: as many as the data gives; else at most this many
  ValidationData validation_data;    // &dataset or &stream
  int64_t validation_freq = 1;       // validate after every k-th epoch
  int64_t validation_batch_size = 0; // 0: batch_size
  bool shuffle = true;
  uint64_t seed = 0;                 // the data order is a function of (seed, epoch)
  bool catch_preemption = true;      // SIGTERM/SIGINT: agree, call on_preemption, return
  // Seconds between the processes' votes on stop and preemption requests
  // (step_vote.h); < 0: COHORT_FIT_VOTE_INTERVAL_S (0.2); 0: every step.
  double vote_interval_s = -1;
  std::vector<std::shared_ptr<Callback>> callbacks;
  // Elastic jobs (cohortrun --min-np; the file comment): commit the state
  // in memory every this many steps and at every epoch's end. A member lost
  // between commits makes every member redo the steps since the last one.
  int64_t elastic_commit_steps = 1;
  // The chief prints a line when training starts (the strategy, what it
  // chose for the model, the run's shape) and one when a callback stops it
  // early (why).
  bool verbose = true;
};

struct EvaluateOptions {
  int64_t batch_size = 256;  // global
  std::vector<std::shared_ptr<Callback>> callbacks;
};

struct PredictOptions {
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
  // evaluates its own share; no collective until the merge); collective.
  Logs evaluate(const Dataset& data, EvaluateOptions options = {});
  Logs evaluate(BatchStream& data, EvaluateOptions options = {});
  // The outputs for every row of `data`, in order, on every process (each
  // computes a contiguous share, then they are gathered); collective.
  at::Tensor predict(const Dataset& data, PredictOptions options);
  at::Tensor predict(const Dataset& data, int64_t batch_size = 256) {
    return predict(data, PredictOptions{.batch_size = batch_size});
  }

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
  // comment); `reason` (the first given) goes into the History and the
  // chief's last line.
  void stop_training(std::string reason = "");
  bool stop_requested() const { return stop_requested_; }
  const FitPosition& position() const { return position_; }
  const FitOptions& fit_options() const { return fit_options_; }
  const History& history() const { return history_; }
  // While fit() runs, from the first epoch's end: every process's step
  // accounting over the last epoch (index = rank; one entry with one
  // process): means per step of compute, peer wait, transfer and input
  // (cohort/telemetry/rank_sample.h; host and pid are this process's only).
  const std::vector<telemetry::RankSample>& epoch_ranks() const;

  // Everything a resumed fit() needs to continue bit for bit: the
  // strategy's model and optimizer state, the position, the partial epoch's
  // metric states, the history, the callbacks' states and every process's
  // LibTorch random generator. save_fit_state() is collective (the chief's
  // archive is the one written); load_fit_state() on every process with the
  // same archive, from a callback's restore() (fit() then continues from
  // it) or before fit(). A strategy that saves sharded
  // (Strategy::sharded_checkpoints(): zero) writes its state into `shards`,
  // a directory, each process its own part, and the archive names the save;
  // any strategy with sharded checkpoints reads such a save back.
  void save_fit_state(torch::serialize::OutputArchive& archive, const std::string& shards = "");
  void load_fit_state(torch::serialize::InputArchive& archive, const std::string& shards = "");

 private:
  // What a fit's state holds besides the strategy's and the metrics:
  // position, history, callbacks' states, the stream's cursor (fit_state.cc).
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
  // The elastic state's record of the fit (progress and whether it stopped), as bytes.
  std::string elastic_progress() const;
  void load_elastic_progress(const std::string& bytes);

  // fit() after its checks: the epochs, plain or elastic; returns whether
  // it was preempted.
  bool train(BatchStream& train, Logs& last);
  // The elastic fit (elastic_fit.cc); false: host discovery left this
  // process out (no world to end training in).
  bool train_elastic(BatchStream& train, bool& preempted, Logs& last);
  // The stream's epoch at position_ (its steps into position_).
  void start_epoch(BatchStream& train);
  // Epochs from position_ until the last, a stop or preemption (returned);
  // `elastic` commits each step. `last`: the last epoch's logs.
  bool run_epochs(BatchStream& train, bool epoch_started, ElasticState* elastic, Logs& last);
  // The loss and metrics over `data`'s epoch 0, each process its share.
  Logs run_evaluation(BatchStream& data, int64_t batch_size, CallbackList& callbacks, const std::string& prefix);
  void print_start() const;

  Strategy& strategy_;
  LossFn loss_;
  MetricStates metrics_;
  FitOptions fit_options_;
  CallbackList callbacks_;
  FitPosition position_;
  History history_;
  bool stop_requested_ = false;
  std::string stop_reason_;
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
  std::unique_ptr<StepTelemetry> telemetry_;  // while fit() runs
};

}  // namespace cohort
