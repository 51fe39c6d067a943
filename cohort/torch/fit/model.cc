#include "cohort/torch/fit/model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"
#include "cohort/torch/core/elastic_state.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/data/dataset_stream.h"
#include "cohort/torch/fit/epoch_iterator.h"
#include "cohort/torch/fit/preemption.h"
#include "cohort/torch/fit/step_telemetry.h"

namespace cohort {
namespace {

// Slots of the epoch-end agreement.
enum EpochVote : int64_t { kEpochStop, kChiefLr, kEpochVoteSize };

}  // namespace

Model::Model(Strategy& strategy, TrainingModel model, std::vector<std::shared_ptr<Metric>> metrics)
    : strategy_(strategy), loss_(model.loss), metrics_(std::move(metrics)) {
  strategy_.prepare(std::move(model));
}

Model::~Model() = default;

const std::vector<telemetry::RankSample>& Model::epoch_ranks() const {
  static const std::vector<telemetry::RankSample> none;
  return telemetry_ ? telemetry_->epoch_ranks() : none;
}

double Model::learning_rate() {
  auto& groups = optimizer().param_groups();
  COHORT_CHECK_AS(ConfigError, !groups.empty()) << "the optimizer has no param groups";
  return groups.front().options().get_lr();
}

void Model::set_learning_rate(double lr) {
  for (auto& group : optimizer().param_groups()) group.options().set_lr(lr);
}

void Model::stop_training(std::string reason) {
  stop_requested_ = true;
  if (stop_reason_.empty()) stop_reason_ = std::move(reason);
}

History Model::fit(const Dataset& train, FitOptions options) {
  DatasetStream stream(train, options.shuffle, options.seed, strategy_.batch_sampler(), position_.step);
  return fit(static_cast<BatchStream&>(stream), std::move(options));
}

History Model::fit(BatchStream& train, FitOptions options) {
  COHORT_CHECK_AS(ConfigError, options.epochs >= 0) << "fit: epochs must be >= 0, got " << options.epochs;
  COHORT_CHECK_AS(ConfigError, options.batch_size >= 1) << "fit: batch_size must be >= 1, got " << options.batch_size;
  COHORT_CHECK_AS(ConfigError, options.steps_per_epoch >= 0)
      << "fit: steps_per_epoch must be >= 0, got " << options.steps_per_epoch;
  COHORT_CHECK_AS(ConfigError, options.validation_freq >= 1)
      << "fit: validation_freq must be >= 1, got " << options.validation_freq;
  COHORT_CHECK_AS(ConfigError, options.elastic_commit_steps >= 1)
      << "fit: elastic_commit_steps must be >= 1, got " << options.elastic_commit_steps;
  COHORT_CHECK_AS(ConfigError, options.validation_batch_size >= 0)
      << "fit: validation_batch_size must be >= 0, got " << options.validation_batch_size;
  const int64_t n = train.size();
  COHORT_CHECK_AS(ConfigError, n > 0 || options.epochs == 0) << "fit: the training data is empty";
  // A strategy's own sampler (DP-SGD's Poisson sampling) replaces the cut
  // of shuffled global batches; only a Dataset can be sampled that way.
  const auto* dataset_stream = dynamic_cast<const DatasetStream*>(&train);
  COHORT_CHECK_AS(ConfigError, !strategy_.batch_sampler() || (dataset_stream && dataset_stream->sampled()))
      << "fit: strategy " << strategy_.spec()
      << " samples each step's rows itself (Poisson sampling), which needs an indexable Dataset, not a stream";
  // An elastic job's fit goes on through membership changes when the
  // strategy follows them; a strategy of several processes that does not
  // would lose its state with a member.
  const bool elastic_job = initialized() && elastic();
  COHORT_CHECK_AS(ConfigError, !elastic_job || strategy_.elastic() || strategy_.process_count() == 1)
      << "fit: this is an elastic job (cohortrun --min-np), and the " << strategy_.spec()
      << " strategy cannot follow its membership changes (these can: " << strategies_that_follow_membership() << ")";
  CallbackList callbacks(options.callbacks, "fit");

  fit_options_ = std::move(options);
  callbacks_ = std::move(callbacks);
  const FitOptions& o = fit_options_;
  strategy_.begin_training({.dataset_size = n, .global_batch_size = o.batch_size, .epochs = o.epochs});
  const BatchSampler* sampler = strategy_.batch_sampler();
  const int64_t data_steps = sampler ? sampler->steps_per_epoch(n) : (n + o.batch_size - 1) / o.batch_size;
  position_ = {.epochs = o.epochs,
               .steps_per_epoch = o.steps_per_epoch > 0 ? std::min(o.steps_per_epoch, data_steps) : data_steps};
  history_ = History();
  stop_requested_ = false;
  stop_reason_.clear();
  stopped_ = false;
  committed_metrics_ = at::Tensor();
  resumed_ = false;
  resumed_stream_state_.clear();
  stream_ = &train;
  telemetry_ = std::make_unique<StepTelemetry>(strategy_.process_count(), is_chief());
  struct Reset {
    BatchStream*& stream;
    std::unique_ptr<StepTelemetry>& telemetry;
    ~Reset() {
      stream = nullptr;
      telemetry.reset();
    }
  } reset{stream_, telemetry_};
  telemetry_->publish_job({.strategy = strategy_.description(),
                           .backend = initialized() ? world_backend() : "local",
                           .size = strategy_.process_count(),
                           .replicas = strategy_.replicas_in_sync(),
                           .global_batch = o.batch_size,
                           .epochs = o.epochs,
                           .steps_per_epoch = position_.steps_per_epoch,
                           .unix_time_s = telemetry::unix_now_s()});

  Logs last;
  bool preempted = false;
  try {
    PreemptionWatch watch(o.catch_preemption);
    if (elastic_job && strategy_.elastic()) {
      // Left out by host discovery: no world to end training in with the others.
      if (!train_elastic(train, preempted, last)) return history_;
    } else {
      preempted = this->train(train, last);
    }
  } catch (const std::exception& e) {
    // The other processes fail at their next collective with this reason
    // instead of waiting for this one.
    strategy_.abort(e.what());
    throw;
  }
  if (stopped_ && !preempted) {
    history_.set_stop_reason(stop_reason_.empty() ? "another process asked to stop" : stop_reason_);
    if (o.verbose && is_chief()) {
      std::printf("fit: stopped after epoch %lld of %lld: %s\n", static_cast<long long>(position_.epoch),
                  static_cast<long long>(o.epochs), history_.stop_reason().c_str());
      std::fflush(stdout);
    }
  }
  if (!preempted) callbacks_.on_train_end(*this, last);
  history_.set_preempted(preempted);
  return history_;
}

bool Model::train(BatchStream& train, Logs& last) {
  callbacks_.restore(*this);
  // The epoch's steps as the stream counts them (a resumed stream may have
  // another number left), before any callback reads the position.
  if (position_.epoch < fit_options_.epochs) start_epoch(train);
  print_start();
  callbacks_.on_train_begin(*this, {});
  epoch_metrics_ = resumed_ ? resumed_epoch_metrics_ : metrics_.zeros();
  resumed_ = false;
  return run_epochs(train, /*epoch_started=*/true, nullptr, last);
}

void Model::print_start() const {
  if (!fit_options_.verbose || !is_chief()) return;
  const FitOptions& o = fit_options_;
  const bool sampled = strategy_.batch_sampler() != nullptr;
  std::printf(
      "fit: %s; %d replica%s in %d process%s; %s %lld; %lld epoch%s of %lld steps%s\n", strategy_.description().c_str(),
      strategy_.replicas_in_sync(), strategy_.replicas_in_sync() == 1 ? "" : "s", strategy_.process_count(),
      strategy_.process_count() == 1 ? "" : "es", sampled ? "expected global batch" : "global batch",
      static_cast<long long>(o.batch_size), static_cast<long long>(o.epochs), o.epochs == 1 ? "" : "s",
      static_cast<long long>(position_.steps_per_epoch),
      position_.step > 0
          ? (", resuming at epoch " + std::to_string(position_.epoch + 1) + ", step " + std::to_string(position_.batch))
                .c_str()
          : "");
  std::fflush(stdout);
}

void Model::start_epoch(BatchStream& train) {
  const FitOptions& o = fit_options_;
  const int64_t left = train.start_epoch(strategy_.input_context(o.batch_size), position_.epoch, position_.batch,
                                         std::exchange(resumed_stream_state_, {}));
  const int64_t steps = position_.batch + left;
  position_.steps_per_epoch = o.steps_per_epoch > 0 ? std::min(o.steps_per_epoch, steps) : steps;
}

bool Model::run_epochs(BatchStream& train, bool epoch_started, ElasticState* elastic, Logs& last) {
  const FitOptions& o = fit_options_;
  const bool sampled = strategy_.batch_sampler() != nullptr;
  bool preempted = false;
  // The epoch's metric sums so far: this process's, or (elastic) the sums
  // over every member at the last commit plus this member's since.
  auto running_metrics = [&] { return elastic ? committed_metrics_ + epoch_metrics_ : epoch_metrics_; };
  auto requests = [&] {
    return StepVote::Requests{.stop = stop_requested_, .preempt = o.catch_preemption && PreemptionWatch::requested()};
  };
  while (position_.epoch < o.epochs && !stopped_ && !preempted) {
    const int64_t epoch = position_.epoch;
    if (!epoch_started) start_epoch(train);
    epoch_started = false;
    module().train();
    callbacks_.on_epoch_begin(*this, epoch, {});
    StepVote vote([this](const at::Tensor& v) { return strategy_.all_sum_async(v); },
                  {.rows_known = train.next_global_rows().has_value(),
                   .interval_s = o.vote_interval_s >= 0 ? o.vote_interval_s : tunables::fit_vote_interval_s(),
                   .is_chief = is_chief()});
    EpochIterator steps(train, position_.batch, position_.steps_per_epoch, sampled, vote, requests);
    StepTelemetry& telemetry = *telemetry_;
    for (;;) {
      telemetry.step_begins();
      std::optional<EpochIterator::Step> step = steps.next();
      if (!step) break;
      telemetry.input_ready();
      callbacks_.on_train_batch_begin(*this, step->index, {});
      vote.step_starts(step->index, requests());
      telemetry.compute_begins();
      const StepResult result = strategy_.train_step(step->batch, step->global_rows);
      metrics_.update(epoch_metrics_, result, step->batch.target);
      telemetry.compute_done();
      ++position_.batch;
      ++position_.step;
      if (!callbacks_.empty()) callbacks_.on_train_batch_end(*this, step->index, metrics_.logs(running_metrics()));
      telemetry.step_ends(step->batch.rows(), epoch, position_.step);
      // A step and its callbacks are done once committed (elastic): a member
      // lost before the commit's collective makes every member redo them,
      // one lost after does not.
      if (elastic && (position_.batch % o.elastic_commit_steps == 0 || position_.batch == position_.steps_per_epoch))
        elastic->commit();
    }
    vote.finish();
    if (steps.end() == EpochIterator::End::preempt) {
      preempted = true;
      callbacks_.on_preemption(*this);
      break;
    }
    const bool stopped_mid_epoch = steps.end() == EpochIterator::End::stop;

    // Every process's step accounting rides in the metrics' merge.
    const at::Tensor merged_all = strategy_.all_sum(at::cat({epoch_metrics_, telemetry.epoch_rows()}));
    const at::Tensor merged = merged_all.narrow(0, 0, epoch_metrics_.numel());
    Logs logs = metrics_.logs(elastic ? committed_metrics_ + merged : merged);
    for (const auto& [name, value] : strategy_.logs()) logs[name] = value;
    telemetry.finish_epoch(merged_all.narrow(0, epoch_metrics_.numel(), merged_all.numel() - epoch_metrics_.numel()),
                           logs);
    const bool complete = position_.batch >= position_.steps_per_epoch;
    if (complete && o.validation_data && (epoch + 1) % o.validation_freq == 0) {
      const int64_t batch = o.validation_batch_size > 0 ? o.validation_batch_size : o.batch_size;
      const Logs val =
          o.validation_data.stream ? run_evaluation(*o.validation_data.stream, batch, callbacks_, "val_") : [&] {
            DatasetStream stream(*o.validation_data.dataset, false, 0, nullptr, position_.step);
            return run_evaluation(stream, batch, callbacks_, "val_");
          }();
      logs.insert(val.begin(), val.end());
    }
    history_.add_epoch(epoch, logs);
    telemetry.publish_epoch(epoch, position_.step, logs);
    last = logs;
    // The position a backup taken at epoch end resumes from: the next epoch.
    ++position_.epoch;
    position_.batch = 0;
    // In place: an elastic state tallies these tensors.
    epoch_metrics_.zero_();
    if (elastic) committed_metrics_.zero_();
    callbacks_.on_epoch_end(*this, epoch, logs);

    // Stop votes and the chief's learning rate, agreed by everyone.
    const at::Tensor agreed = strategy_.all_sum(at::tensor(
        std::vector<double>{stop_requested_ || stopped_mid_epoch ? 1.0 : 0.0, is_chief() ? learning_rate() : 0.0},
        at::kDouble));
    stopped_ = agreed[kEpochStop].item<double>() > 0;
    const double lr = agreed[kChiefLr].item<double>();
    if (lr != learning_rate()) set_learning_rate(lr);
    // The epoch's end, committed: its history entry and callbacks run once.
    if (elastic) elastic->commit();
  }
  return preempted;
}

}  // namespace cohort
