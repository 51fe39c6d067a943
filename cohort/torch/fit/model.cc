#include "cohort/torch/fit/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>
#include <utility>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/elastic_state.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/fit/preemption.h"

namespace cohort {
namespace {

// Slots of a step's vote: cast before a step, read before a later one. The
// last carries the chief's seconds per step since its previous vote (zero
// from the others), from which every process derives the same cadence.
enum Vote : int64_t { kRows, kStop, kPreempt, kChiefStepSeconds, kVoteSize };
// Votes are at least one step and at most this many steps apart.
constexpr int64_t kMaxStepsBetweenVotes = 10000;
// Slots of the epoch-end agreement.
enum EpochVote : int64_t { kEpochStop, kChiefLr, kEpochVoteSize };
// The first slots of a metric-state vector: the loss sum and the rows.
constexpr int64_t kLossSum = 0, kLossRows = 1, kLossSlots = 2;

at::Tensor doubles(std::initializer_list<double> values) {
  return torch::tensor(std::vector<double>(values), torch::kFloat64);
}

// Steps from one vote to the next so that votes come about `interval_s`
// apart at the agreed step time; one step while it is unknown.
int64_t steps_between_votes(double interval_s, double step_s) {
  if (interval_s <= 0 || step_s <= 0) return 1;
  return static_cast<int64_t>(std::clamp(std::floor(interval_s / step_s), 1.0, double(kMaxStepsBetweenVotes)));
}

// This process's rows of a global batch of `rows`: the contiguous union of
// its replicas' blocks (replicas are numbered process by process).
RowBlock process_block(int64_t rows, const Strategy& strategy) {
  const int replicas = strategy.replicas_in_sync(), local = strategy.local_replicas();
  const int first = strategy.process_index() * local;
  const RowBlock a = reduce_scatter_block(rows, replicas, first);
  const RowBlock b = reduce_scatter_block(rows, replicas, first + local - 1);
  return {a.offset, b.offset + b.rows - a.offset};
}

// The rows of `n` in the order of (seed, epoch): the sampler's permutation,
// identical on every process and every run.
at::Tensor epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  if (!shuffle) return torch::arange(n, torch::kInt64);
  const std::vector<size_t> p = permutation(size_t(n), seed, epoch);
  return torch::tensor(std::vector<int64_t>(p.begin(), p.end()), torch::kInt64);
}

// A Dataset as fit() reads it: the rows of each global batch in the order of
// (seed, epoch), this process's block of them read by index. Its position
// is fit()'s (epoch, batch), so it has no state of its own. A strategy's
// BatchSampler (a private strategy's Poisson sampling) chooses each step's
// rows instead, from the training step's number: such steps vary in size
// and may be empty everywhere, so their rows are voted on.
class DatasetStream final : public BatchStream {
 public:
  DatasetStream(const Dataset& data, bool shuffle, uint64_t seed, const BatchSampler* sampler,
                const int64_t& training_step)
      : data_(data), shuffle_(shuffle), seed_(seed), sampler_(sampler), training_step_(training_step) {}

  int64_t size() const override { return data_.size(); }
  int64_t start_epoch(const Strategy& strategy, int64_t global_batch_size, int64_t epoch, int64_t batches_done,
                      const std::string&) override {
    strategy_ = &strategy;
    batch_size_ = global_batch_size;
    batch_ = batches_done;
    sampled_step_ = -1;
    const int64_t n = data_.size();
    if (!sampler_) order_ = epoch_order(n, shuffle_, seed_, epoch);
    const int64_t steps = sampler_ ? sampler_->steps_per_epoch(n) : (n + batch_size_ - 1) / batch_size_;
    return std::max<int64_t>(0, steps - batches_done);
  }
  int64_t next_rows() const override { return sampler_ ? sampled_rows().numel() : block().rows; }
  std::optional<int64_t> next_global_rows() const override {
    if (sampler_) return std::nullopt;
    return global_rows();
  }
  Batch next() override {
    if (sampler_) {
      const at::Tensor rows = sampled_rows();
      ++batch_;
      return rows.numel() > 0 ? data_.get(rows) : Batch{};
    }
    const RowBlock mine = block();
    const int64_t begin = batch_ * batch_size_;
    ++batch_;
    return mine.rows > 0 ? data_.get(order_.narrow(0, begin + mine.offset, mine.rows)) : Batch{};
  }
  std::string state() const override { return {}; }
  bool sampled() const { return sampler_ != nullptr; }

 private:
  int64_t global_rows() const {
    return std::max<int64_t>(0, std::min(batch_size_, data_.size() - batch_ * batch_size_));
  }
  RowBlock block() const { return process_block(global_rows(), *strategy_); }
  // This process's rows of the current training step, drawn once per step.
  const at::Tensor& sampled_rows() const {
    if (sampled_step_ != training_step_) {
      sampled_ = sampler_->process_rows(data_.size(), training_step_);
      sampled_step_ = training_step_;
    }
    return sampled_;
  }

  const Dataset& data_;
  bool shuffle_;
  uint64_t seed_;
  const BatchSampler* sampler_;
  const int64_t& training_step_;  // fit()'s position().step
  const Strategy* strategy_ = nullptr;
  int64_t batch_size_ = 1;
  int64_t batch_ = 0;
  at::Tensor order_;
  mutable int64_t sampled_step_ = -1;
  mutable at::Tensor sampled_;
};

void write_state(torch::serialize::OutputArchive& archive, const std::string& key, const CallbackState& state) {
  torch::serialize::OutputArchive sub;
  for (const auto& [name, values] : state) sub.write(name, torch::tensor(values, torch::kFloat64));
  archive.write(key, sub);
}

CallbackState read_state(torch::serialize::InputArchive& archive, const std::string& key) {
  CallbackState state;
  torch::serialize::InputArchive sub;
  if (!archive.try_read(key, sub)) return state;
  for (const std::string& name : sub.keys()) {
    at::Tensor t;
    sub.read(name, t);
    t = t.to(torch::kFloat64).contiguous();
    state[name] = std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  return state;
}

}  // namespace

Model::Model(Strategy& strategy, TrainingModel model, std::vector<std::shared_ptr<Metric>> metrics)
    : strategy_(strategy), loss_(model.loss), metrics_(std::move(metrics)) {
  for (const auto& m : metrics_) COHORT_CHECK_AS(ConfigError, m != nullptr) << "Model: a metric is null";
  strategy_.prepare(std::move(model));
}

Model::~Model() = default;

double Model::learning_rate() {
  auto& groups = optimizer().param_groups();
  COHORT_CHECK_AS(ConfigError, !groups.empty()) << "the optimizer has no param groups";
  return groups.front().options().get_lr();
}

void Model::set_learning_rate(double lr) {
  for (auto& group : optimizer().param_groups()) group.options().set_lr(lr);
}

at::Tensor Model::new_metric_state() const {
  int64_t size = kLossSlots;
  for (const auto& m : metrics_) size += m->state_size();
  return torch::zeros({size}, torch::kFloat64);
}

void Model::update_metrics(at::Tensor& state, const StepResult& step, const Batch& batch) const {
  if (step.rows == 0) return;
  // The state is new_metric_state()'s: float64 on the CPU, written in place.
  double* loss = state.data_ptr<double>();
  loss[kLossSum] += step.loss_sum;
  loss[kLossRows] += double(step.rows);
  torch::NoGradGuard no_grad;
  int64_t offset = kLossSlots;
  for (const auto& m : metrics_) {
    at::Tensor slice = state.narrow(0, offset, m->state_size());
    m->update(slice, step.output, batch.target);
    offset += m->state_size();
  }
}

Logs Model::epoch_logs(const at::Tensor& merged, const std::string& prefix) const {
  Logs logs;
  const double rows = merged[kLossRows].item<double>();
  logs[prefix + "loss"] = rows > 0 ? merged[kLossSum].item<double>() / rows : std::nan("");
  int64_t offset = kLossSlots;
  for (const auto& m : metrics_) {
    logs[prefix + m->name()] = m->result(merged.narrow(0, offset, m->state_size()));
    offset += m->state_size();
  }
  return logs;
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
  for (const auto& c : options.callbacks) COHORT_CHECK_AS(ConfigError, c != nullptr) << "fit: a callback is null";
  const int64_t n = train.size();
  const int64_t full_steps = (n + options.batch_size - 1) / options.batch_size;
  COHORT_CHECK_AS(ConfigError, full_steps > 0 || options.epochs == 0) << "fit: the training data is empty";

  // A strategy's own sampler (DP-SGD's Poisson sampling) replaces the cut
  // of shuffled global batches (batch_size is then unused); only a Dataset
  // can be sampled that way.
  const auto* dataset_stream = dynamic_cast<const DatasetStream*>(&train);
  const bool sampled = dataset_stream && dataset_stream->sampled();
  COHORT_CHECK_AS(ConfigError, !strategy_.batch_sampler() || sampled)
      << "fit: strategy " << strategy_.spec()
      << " samples each step's rows itself (Poisson sampling), which needs an indexable Dataset, not a stream";
  // An elastic job's fit goes on through membership changes when the
  // strategy follows them; a strategy of one process per replica set that
  // does not would lose its state with a member.
  const bool elastic_job = initialized() && elastic();
  const bool elastic_fit = elastic_job && strategy_.follows_membership();
  COHORT_CHECK_AS(ConfigError, !elastic_job || elastic_fit || strategy_.process_count() == 1)
      << "fit: this is an elastic job (cohortrun --min-np), and the " << strategy_.spec()
      << " strategy cannot follow its membership changes (" << Strategy::kStrategiesThatFollowMembership << " can)";
  fit_options_ = std::move(options);
  const FitOptions& o = fit_options_;
  const BatchSampler* sampler = strategy_.batch_sampler();
  const int64_t data_steps = sampler ? sampler->steps_per_epoch(n) : full_steps;
  position_ = {.epochs = o.epochs,
               .steps_per_epoch = o.steps_per_epoch > 0 ? std::min(o.steps_per_epoch, data_steps) : data_steps};
  history_ = History();
  stop_requested_ = false;
  stopped_ = false;
  committed_metrics_ = at::Tensor();
  resumed_ = false;
  resumed_stream_state_.clear();
  PreemptionWatch watch(o.catch_preemption);
  stream_ = &train;
  struct StreamReset {
    BatchStream*& stream;
    ~StreamReset() { stream = nullptr; }
  } stream_reset{stream_};

  // A process started while the job runs joins a fit in progress: the members hand it their state
  // (ElasticState::sync()), and the callbacks' restore(), collective among
  // the processes that started the job, is not for it.
  if (!elastic_fit || !elastic_joining())
    for (const auto& c : o.callbacks) c->restore(*this);
  // The epoch's steps as the stream counts them (a resumed stream may have
  // another number left), before any callback reads the position.
  if (position_.epoch < o.epochs) start_epoch(train);
  for (const auto& c : o.callbacks) c->on_train_begin(*this, {});
  bool preempted = false;
  Logs last;
  if (!elastic_fit) {
    epoch_metrics_ = resumed_ ? resumed_epoch_metrics_ : new_metric_state();
    resumed_ = false;
    preempted = run_epochs(train, /*epoch_started=*/true, nullptr, last);
  } else {
    // Every step (or every elastic_commit_steps) is committed in memory:
    // the model and optimizer, the strategy's own state, the metric sums
    // over every member, the position, history, callbacks' states and the
    // input's cursor. The order of the global batches is the world's
    // business only through the split (a Dataset's rows, an input
    // pipeline's positions), so after a change the members go on with the
    // same batches split anew: no row of an epoch is skipped or trained
    // twice.
    ElasticState state(module(), optimizer());
    // A strategy that splits the model over its processes commits its
    // parts itself (zero: each with a copy on another process).
    if (ElasticShards* shards = strategy_.elastic_shards()) state.shard(*shards);
    // Only the processes that train hold its state (not parameter servers).
    state.set_group([this] { return strategy_.elastic_group(); });
    // A backup's partial epoch (the chief's merged sums) is everyone's total.
    epoch_metrics_ = new_metric_state();
    committed_metrics_ = resumed_ ? strategy_.all_sum(resumed_epoch_metrics_).clone() : new_metric_state();
    resumed_ = false;
    state.tally("metrics", epoch_metrics_, committed_metrics_);
    state.track(
        "strategy", [this] { return strategy_.own_state(); },
        [this](const std::string& bytes) { strategy_.load_own_state(bytes); });
    state.track(
        "fit",
        [this] {
          torch::serialize::OutputArchive archive;
          write_progress(archive);
          archive.write("stopped", torch::tensor(int64_t(stopped_)));
          std::ostringstream out;
          archive.save_to(out);
          return out.str();
        },
        [this](const std::string& bytes) {
          torch::serialize::InputArchive archive;
          archive.load_from(bytes.data(), bytes.size());
          put_progress(parse_progress(archive));
          at::Tensor stopped;
          archive.read("stopped", stopped);
          stopped_ = stopped.item<int64_t>() != 0;
        });
    const bool member = run_elastic(
        state, [&] { preempted = run_epochs(train, /*epoch_started=*/false, &state, last); },
        [this] { strategy_.rejoin(); });
    // Left out by host discovery: no world to end training in with the others.
    if (!member) return history_;
  }
  if (!preempted)
    for (const auto& c : o.callbacks) c->on_train_end(*this, last);
  history_.set_preempted(preempted);
  return history_;
}

void Model::start_epoch(BatchStream& train) {
  const FitOptions& o = fit_options_;
  const int64_t left = train.start_epoch(strategy_, o.batch_size, position_.epoch, position_.batch,
                                         std::exchange(resumed_stream_state_, {}));
  const int64_t steps = position_.batch + left;
  position_.steps_per_epoch = o.steps_per_epoch > 0 ? std::min(o.steps_per_epoch, steps) : steps;
}

bool Model::run_epochs(BatchStream& train, bool epoch_started, ElasticState* elastic, Logs& last) {
  const FitOptions& o = fit_options_;
  const bool sampled = strategy_.batch_sampler() != nullptr;
  bool preempted = false;
  bool& stopped = stopped_;
  // The epoch's metric sums so far: this process's, or (elastic) the sums
  // over every member at the last commit plus this member's since.
  auto running_metrics = [&] { return elastic ? committed_metrics_ + epoch_metrics_ : epoch_metrics_; };
  while (position_.epoch < o.epochs && !stopped && !preempted) {
    const int64_t epoch = position_.epoch;
    if (!epoch_started) start_epoch(train);
    epoch_started = false;
    module().train();
    for (const auto& c : o.callbacks) c->on_epoch_begin(*this, epoch, {});
    // Stop and preemption requests, and the step's rows when the input
    // cannot tell them alone, are agreed by a vote of [rows, stop, preempt,
    // chief's step time]. When the input knows every step's global rows (a
    // Dataset: its size and the split say them), the vote is asynchronous
    // and periodic: cast as a voting step starts, overlapping its compute and
    // gradient exchange, and read before the next voting step, which is as
    // many steps later as fit about vote_interval_s at the chief's measured
    // step time. Every process reads the same vote, so all derive the same
    // cadence and stop at the same step. A request takes effect within about
    // two intervals, and the vote's collective is paid once per interval,
    // not per step (one per step cost a small model 19% of its step on 2
    // ranks, bench/fit_overhead.sh). Otherwise (an input pipeline whose
    // shards end unevenly) every step votes on its rows before it runs.
    const bool rows_known = train.next_global_rows().has_value();
    const double vote_interval_s =
        o.vote_interval_s >= 0 ? o.vote_interval_s : tunables::fit_vote_interval_s();
    auto last_cast = std::chrono::steady_clock::now();
    int64_t last_cast_batch = position_.batch;
    auto cast_vote = [&](int64_t my_rows) {
      const bool preempt = o.catch_preemption && PreemptionWatch::requested();
      const auto now = std::chrono::steady_clock::now();
      double step_s = 0;
      if (is_chief() && position_.batch > last_cast_batch)
        step_s = std::chrono::duration<double>(now - last_cast).count() / double(position_.batch - last_cast_batch);
      last_cast = now;
      last_cast_batch = position_.batch;
      return strategy_.all_sum_async(
          doubles({double(my_rows), stop_requested_ ? 1.0 : 0.0, preempt ? 1.0 : 0.0, step_s}));
    };
    TensorHandle vote = rows_known ? cast_vote(0) : TensorHandle();
    int64_t next_vote_batch = position_.batch;  // the step that reads the vote in flight
    while (position_.batch < position_.steps_per_epoch) {
      const int64_t my_rows = train.next_rows();
      const bool voting = !rows_known || position_.batch == next_vote_batch;
      int64_t global_rows = rows_known ? *train.next_global_rows() : 0;
      if (voting) {
        const at::Tensor votes = rows_known ? vote.wait() : cast_vote(my_rows).wait();
        const double* v = votes.data_ptr<double>();
        if (v[kPreempt] > 0) {
          preempted = true;
          break;
        }
        if (v[kStop] > 0) {
          stopped = true;
          break;
        }
        if (!rows_known) global_rows = static_cast<int64_t>(v[kRows]);
        next_vote_batch = position_.batch + steps_between_votes(vote_interval_s, v[kChiefStepSeconds]);
      }
      // A sampled step may hold no row anywhere and is still a step (DP-SGD
      // releases its noise); fixed batches end the epoch there.
      if (global_rows == 0 && !sampled) break;

      Batch batch = train.next();
      COHORT_CHECK_AS(MismatchError, batch.rows() == my_rows)
          << "fit: the training input said its next batch has " << my_rows << " rows here, then gave " << batch.rows();
      for (const auto& c : o.callbacks) c->on_train_batch_begin(*this, position_.batch, {});
      if (rows_known && voting) vote = cast_vote(0);
      const StepResult result = strategy_.train_step(batch, global_rows);
      update_metrics(epoch_metrics_, result, batch);
      ++position_.batch;
      ++position_.step;
      if (!o.callbacks.empty()) {
        const Logs logs = epoch_logs(running_metrics(), "");
        for (const auto& c : o.callbacks) c->on_train_batch_end(*this, position_.batch - 1, logs);
      }
      // A step and its callbacks are done once committed (elastic): a member
      // lost before the commit's collective makes every member redo them,
      // one lost after does not.
      if (elastic && (position_.batch % o.elastic_commit_steps == 0 || position_.batch == position_.steps_per_epoch))
        elastic->commit();
    }
    // The last step's vote is still in flight: finish it here, so that no
    // collective of this epoch outlives it (every process cast it).
    if (vote.valid()) vote.wait();
    if (preempted) {
      for (const auto& c : o.callbacks) c->on_preemption(*this);
      break;
    }

    const at::Tensor merged = strategy_.all_sum(epoch_metrics_);
    Logs logs = epoch_logs(elastic ? committed_metrics_ + merged : merged, "");
    for (const auto& [name, value] : strategy_.logs()) logs[name] = value;
    const bool complete = position_.batch >= position_.steps_per_epoch;
    if (complete && o.validation_data && (epoch + 1) % o.validation_freq == 0) {
      const Logs val = run_evaluation(*o.validation_data,
                                      o.validation_batch_size > 0 ? o.validation_batch_size : o.batch_size,
                                      o.callbacks, "val_");
      logs.insert(val.begin(), val.end());
    }
    history_.add_epoch(epoch, logs);
    last = logs;
    // The position a backup taken at epoch end resumes from: the next epoch.
    ++position_.epoch;
    position_.batch = 0;
    // In place: an elastic state tallies these tensors.
    epoch_metrics_.zero_();
    if (elastic) committed_metrics_.zero_();
    for (const auto& c : o.callbacks) c->on_epoch_end(*this, epoch, logs);

    // Stop votes and the chief's learning rate, agreed by everyone.
    const at::Tensor agreed = strategy_.all_sum(
        doubles({stop_requested_ || stopped ? 1.0 : 0.0, is_chief() ? learning_rate() : 0.0}));
    stopped = agreed[kEpochStop].item<double>() > 0;
    const double lr = agreed[kChiefLr].item<double>();
    if (lr != learning_rate()) set_learning_rate(lr);
    // The epoch's end, committed: its history entry and callbacks run once.
    if (elastic) elastic->commit();
  }
  return preempted;
}
Logs Model::run_evaluation(const Dataset& data, int64_t batch_size,
                           const std::vector<std::shared_ptr<Callback>>& callbacks, const std::string& prefix) {
  COHORT_CHECK_AS(ConfigError, batch_size >= 1) << "evaluate: batch_size must be >= 1, got " << batch_size;
  for (const auto& c : callbacks) c->on_test_begin(*this, {});
  const bool was_training = module().is_training();
  module().eval();
  // Each process evaluates a contiguous share, in batches of its share of
  // batch_size; no collective runs until the states are merged, so the
  // processes may run different numbers of batches.
  const RowBlock share = process_block(data.size(), strategy_);
  const int64_t local_batch = std::max<int64_t>(1, process_block(batch_size, strategy_).rows);
  at::Tensor state = new_metric_state();
  int64_t batch_index = 0;
  for (int64_t start = 0; start < share.rows; start += local_batch, ++batch_index) {
    const int64_t rows = std::min(local_batch, share.rows - start);
    const Batch batch = data.get(torch::arange(share.offset + start, share.offset + start + rows, torch::kInt64));
    torch::NoGradGuard no_grad;
    StepResult step{.rows = rows, .output = strategy_.predict(batch.input)};
    step.loss_sum = loss_(step.output, batch.target).item<double>() * double(rows);
    update_metrics(state, step, batch);
    if (!callbacks.empty()) {
      const Logs logs = epoch_logs(state, prefix);
      for (const auto& c : callbacks) c->on_test_batch_end(*this, batch_index, logs);
    }
  }
  if (was_training) module().train();
  const Logs logs = epoch_logs(strategy_.all_sum(state), prefix);
  for (const auto& c : callbacks) c->on_test_end(*this, logs);
  return logs;
}

Logs Model::evaluate(const Dataset& data, EvaluateOptions options) {
  for (const auto& c : options.callbacks) COHORT_CHECK_AS(ConfigError, c != nullptr) << "evaluate: a callback is null";
  return run_evaluation(data, options.batch_size, options.callbacks, "");
}

at::Tensor Model::predict(const Dataset& data, int64_t batch_size) {
  COHORT_CHECK_AS(ConfigError, batch_size >= 1) << "predict: batch_size must be >= 1, got " << batch_size;
  const bool was_training = module().is_training();
  module().eval();
  const RowBlock share = process_block(data.size(), strategy_);
  const int64_t local_batch = std::max<int64_t>(1, process_block(batch_size, strategy_).rows);
  std::vector<at::Tensor> outputs;
  for (int64_t start = 0; start < share.rows; start += local_batch) {
    const int64_t rows = std::min(local_batch, share.rows - start);
    outputs.push_back(
        strategy_.predict(data.get(torch::arange(share.offset + start, share.offset + start + rows, torch::kInt64)).input));
  }
  if (was_training) module().train();
  at::Tensor mine;
  if (!outputs.empty()) {
    mine = torch::cat(outputs);
  } else {
    // No rows here: an empty tensor shaped like the others' rows (the first
    // row's output tells the shape; every process can compute it).
    at::Tensor probe = data.size() > 0 ? strategy_.predict(data.get(torch::zeros({1}, torch::kInt64)).input)
                                       : at::Tensor();
    mine = probe.defined() ? probe.narrow(0, 0, 0) : torch::empty({0});
  }
  return strategy_.all_gather(mine);
}

void Model::save_fit_state(torch::serialize::OutputArchive& archive, const std::string& shards) {
  torch::serialize::OutputArchive strategy;
  if (strategy_.sharded_checkpoints() && !shards.empty()) {
    // The small archive names the sharded save it goes with: written after
    // it, it never names a save that is not complete.
    const std::string id = strategy_.save_sharded(shards);
    strategy.write("sharded_save", torch::tensor(std::vector<uint8_t>(id.begin(), id.end()), torch::kUInt8));
  } else {
    strategy_.save(strategy);
  }
  archive.write("strategy", strategy);
  // The epoch's metric states so far, merged over the processes (each holds
  // only its rows'; an elastic fit's committed sums are everyone's already);
  // on resume the chief takes them and the others start from zero, so the
  // epoch's merged metrics come out as if never stopped, at any number of
  // processes.
  at::Tensor metrics = strategy_.all_sum(epoch_metrics_.defined() ? epoch_metrics_ : new_metric_state());
  if (committed_metrics_.defined()) metrics = metrics + committed_metrics_;
  archive.write("epoch_metrics", metrics);
  write_progress(archive);
  // Each process's generator: ranks draw different amounts (dropout over
  // rows of uneven shares), so their states differ.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor mine;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    mine = generator.get_state();
  }
  archive.write("rng", strategy_.all_gather(mine.unsqueeze(0)));
}

void Model::write_progress(torch::serialize::OutputArchive& archive) const {
  archive.write("position", torch::tensor({position_.epoch, position_.batch, position_.step}, torch::kInt64));
  CallbackState history;
  history_.save(history);
  write_state(archive, "history", history);
  torch::serialize::OutputArchive callbacks;
  for (const auto& c : fit_options_.callbacks) {
    CallbackState state;
    c->save_state(state);
    if (!state.empty()) write_state(callbacks, c->name(), state);
  }
  archive.write("callbacks", callbacks);
  // The stream's own position (an input pipeline's cursor), as bytes.
  const std::string stream = stream_ ? stream_->state() : std::string();
  if (!stream.empty())
    archive.write("stream", torch::tensor(std::vector<uint8_t>(stream.begin(), stream.end()), torch::kUInt8));
}

void Model::load_fit_state(torch::serialize::InputArchive& archive, const std::string& shards) {
  at::Tensor metrics, rng;
  torch::serialize::InputArchive strategy;
  try {
    archive.read("strategy", strategy);
    archive.read("epoch_metrics", metrics);
    archive.read("rng", rng);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "not a saved fit state: " << e.what_without_backtrace();
  }
  COHORT_CHECK_AS(ConfigError, metrics.sizes() == new_metric_state().sizes())
      << "saved fit state: its metric states (" << metrics.numel() << " values) do not fit this model's metrics ("
      << new_metric_state().numel() << " values): were the metrics changed?";
  const Progress progress = parse_progress(archive);
  at::Tensor sharded_save;
  if (strategy.try_read("sharded_save", sharded_save)) {
    COHORT_CHECK_AS(ConfigError, !shards.empty())
        << "saved fit state: the strategy's state is in a sharded checkpoint, and no directory was given";
    const auto* id = static_cast<const char*>(sharded_save.data_ptr());
    strategy_.load_sharded(shards, std::string(id, id + sharded_save.numel()));
  } else {
    strategy_.load(strategy);
  }
  put_progress(progress);
  // As new_metric_state() makes them: float64 on the CPU, contiguous.
  const at::Tensor saved = metrics.to(torch::kCPU, torch::kFloat64).contiguous();
  resumed_epoch_metrics_ = strategy_.is_chief() ? saved.clone() : torch::zeros_like(saved);
  resumed_ = true;
  // This process's generator, when the saved run had as many processes;
  // otherwise (a resume at another world size) the chief's, the only
  // state every process can take.
  const int64_t row = rng.dim() == 2 && rng.size(0) == strategy_.process_count() ? strategy_.process_index() : 0;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng.dim() == 2 ? rng[row].contiguous() : rng);
}

Model::Progress Model::parse_progress(torch::serialize::InputArchive& archive) const {
  Progress p;
  at::Tensor position, stream;
  torch::serialize::InputArchive callbacks;
  try {
    archive.read("position", position);
    archive.read("callbacks", callbacks);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "not a saved fit state: " << e.what_without_backtrace();
  }
  COHORT_CHECK_AS(ConfigError, position.numel() == 3 && position.scalar_type() == torch::kInt64)
      << "saved fit state: bad position record";
  const int64_t* at_ = position.data_ptr<int64_t>();
  p.epoch = at_[0];
  p.batch = at_[1];
  p.step = at_[2];
  p.history = read_state(archive, "history");
  for (const auto& c : fit_options_.callbacks) p.callbacks[c->name()] = read_state(callbacks, c->name());
  if (archive.try_read("stream", stream)) {
    stream = stream.to(torch::kUInt8).contiguous();
    p.stream.assign(reinterpret_cast<const char*>(stream.data_ptr<uint8_t>()), size_t(stream.numel()));
  }
  return p;
}

void Model::put_progress(const Progress& p) {
  position_.epoch = p.epoch;
  position_.batch = p.batch;
  position_.step = p.step;
  history_.load(p.history);
  for (const auto& c : fit_options_.callbacks) c->load_state(p.callbacks.at(c->name()));
  resumed_stream_state_ = p.stream;
}

}  // namespace cohort
