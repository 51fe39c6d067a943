// DP-SGD and DP-Adam as a strategy: wraps any strategy with one replica per
// process (one_device, multi_worker) and makes its training steps
// differentially private, so fit() and hand-written loops get privacy from
// the same seam they get distribution from. By a spec (the registered
// wrapper "privacy", core/strategy_registry.h), the budget spent over fit()'s
// epochs:
//
//   auto strategy = cohort::make_strategy("multi_worker+privacy:epsilon=3,max_grad_norm=1");
//   cohort::Model model(*strategy, net, {...});   // SGD: DP-SGD; Adam: DP-Adam
//   model.fit(train, {.epochs = 40, .batch_size = 2048});   // logs "epsilon" every epoch
//
// or in code: make_private(inner, {.noise_multiplier = 1.1, .max_grad_norm = 1, .sample_rate = q}), or
// make_private_with_epsilon(inner, options, {.target_epsilon = 3, .delta = 1e-5, .epochs = 40}).
// Given a target epsilon or no sample rate, the strategy calibrates itself
// when training begins (Strategy::begin_training(), which fit() calls): the
// sample rate is the global batch over the data set's rows, and the noise
// multiplier the smallest that spends at most the target over the run's
// epochs (Opacus's make_private_with_epsilon).
//
// A step, on every process (clipped_gradients.h, gaussian_noise.h):
//   1. this process's rows of the step: Poisson sampling at sample_rate,
//      keyed by (seed, step, example), so the global batch is the same at
//      any process count (the strategy is fit()'s BatchSampler); a process
//      may have none;
//   2. the sum of its samples' gradients, each clipped to max_grad_norm;
//   3. its share of the step's Gaussian noise N(0, (sigma C)^2): shares
//      that add up to one draw over all processes (never one per process);
//   4. the sum over processes (the wrapped strategy's all_sum), divided by
//      the expected batch q N (Poisson) or the step's rows (fixed batches),
//      then the wrapped optimizer's step: SGD makes it DP-SGD, Adam DP-Adam;
//   5. the accountant records (sigma, q).
// The wrapped strategy's own gradient exchange (DDP buckets, Horovod's
// allreduces) never runs: no backward pass accumulates into .grad().
//
// The accountant's history and the step count are saved with the model and
// optimizer (save/load, so fit()'s checkpoints and BackupAndRestore carry
// them) and do not depend on the number of processes: a run resumed at
// another world size continues the same sampling and the same budget.
#pragma once

#include <memory>
#include <string>

#include "cohort/privacy/accountant.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/privacy/clipped_gradients.h"
#include "cohort/torch/privacy/gaussian_noise.h"

namespace cohort::privacy {

struct PrivacyOptions {
  double noise_multiplier = 1.0;  // sigma >= 0
  double max_grad_norm = 1.0;     // C > 0; infinity clips nothing (then sigma must be 0)
  Clipping clipping = Clipping::flat;
  // q in (0, 1]: each example's probability of being in a step's batch, and
  // the rate the accountant assumes; 0: the training plan's global batch
  // over its rows (Strategy::begin_training()).
  double sample_rate = 0;
  // true: fit() trains on Poisson samples (what the accountant assumes);
  // false: on fit()'s shuffled fixed-size batches (batch_size = q N), the
  // common approximation, normalised by each step's rows.
  bool poisson = true;
  double delta = 1e-5;            // the delta of the reported epsilon
  AccountantKind accountant = AccountantKind::rdp;
  uint64_t seed = 0;              // sampling and noise
  bool secure_noise = false;      // OpenSSL's RNG for the noise (gaussian_noise.h)
  NoiseShare noise_share = NoiseShare::split;
};

// A privacy budget to calibrate the noise to.
struct EpsilonTarget {
  double target_epsilon = 0;  // > 0; 0: no target (the options' noise multiplier)
  double delta = 1e-5;        // in (0, 1); also the reported epsilon's
  // The run's length: epochs of steps_per_epoch = round(1 / q) steps, or
  // steps; both 0: the training plan's epochs (Strategy::begin_training()).
  int64_t epochs = 0;
  int64_t steps = 0;
};

class PrivateStrategy : public Strategy, public ElasticTraining, private BatchSampler {
 public:
  // ConfigError for options out of range or a wrapped strategy with several
  // replicas in a process (mirrored, central_storage: not supported yet).
  // A target (target_epsilon > 0) replaces options.noise_multiplier when
  // training begins; so does options.sample_rate 0 (the plan's batch over
  // its rows).
  PrivateStrategy(std::unique_ptr<Strategy> inner, PrivacyOptions options, EpsilonTarget target = {});

  // ElasticTraining: as the wrapped strategy (multi_worker follows the
  // membership; zero's split state is not handled here), and only with
  // designated noise drawn from the seed: then a step redone after a loss,
  // in whatever world, draws the same noise as the first time (rank 0's,
  // keyed by the step), so the accountant's history and the step count
  // (the strategy's own state, committed with the model) count it once.
  // Split shares are keyed by the rank and the world size, and OpenSSL's
  // draws are never the same: a redo would be a second release that a
  // rolled-back accountant would not count.
  void rejoin() override { inner_->elastic()->rejoin(); }
  std::string own_state() const override;
  void load_own_state(const std::string& bytes) override;

  double epsilon() const { return accountant_.epsilon(options_.delta); }
  const Accountant& accountant() const { return accountant_; }
  int64_t steps() const { return steps_; }
  // As calibrated: after begin_training() for a target or a sample rate from the plan.
  const PrivacyOptions& options() const { return options_; }
  GradientPath gradient_path() const { return path_; }
  // Which path each layer's per-sample gradients take, in a line
  // (describe_gradient_path()); set by prepare().
  const std::string& gradient_path_description() const { return path_description_; }
  Strategy& inner() { return *inner_; }

 protected:
  std::string do_spec() const override;
  // The spec, the calibration and the per-sample gradient path the model took.
  std::string do_description() const override;
  ReplicaPlacement do_placement() const override { return inner_->placement(); }
  // Refuses modules that mix samples (BatchNorm: ConfigError naming it and
  // GroupNorm), and a tensor-parallel model over a wrapped strategy of
  // several processes (the data-parallel sum would add different shards;
  // tensor-parallel DP-SGD runs one_device on each rank of the group), then
  // prepares the wrapped strategy. Collective.
  void do_prepare() override;
  torch::nn::Module& do_module() override { return inner_->module(); }
  torch::optim::Optimizer& do_optimizer() override { return inner_->optimizer(); }
  // The sample rate and noise from the plan, when the options leave them to it.
  void do_begin_training(const TrainingPlan& plan) override;
  // One private step (see the file comment). `global_rows` may be 0 (an
  // empty Poisson sample: the step still releases its noise). Collective.
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor do_predict(const at::Tensor& input) override { return inner_->predict(input); }
  at::Tensor do_all_sum(const at::Tensor& values) override { return inner_->all_sum(values); }
  at::Tensor do_all_gather(const at::Tensor& rows) override { return inner_->all_gather(rows); }
  void do_save(torch::serialize::OutputArchive& archive) override;
  void do_load(torch::serialize::InputArchive& archive) override;
  const BatchSampler* do_batch_sampler() const override { return options_.poisson ? this : nullptr; }
  ElasticTraining* do_elastic() override;
  // {"epsilon": the budget spent so far, at options.delta}.
  std::map<std::string, double> do_logs() override;
  void do_abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  int64_t steps_per_epoch(int64_t dataset_size) const override;
  at::Tensor process_rows(int64_t dataset_size, int64_t step) const override;
  // The sample rate and noise multiplier the options leave to `plan`.
  void calibrate(const TrainingPlan& plan);
  // ConfigError until the sample rate (and noise, for a target) are known.
  void require_calibrated(const char* call) const;
  // The accountant's history and the step count, as save() records them.
  void write_record(torch::serialize::OutputArchive& archive) const;
  void read_record(torch::serialize::InputArchive& archive);

  std::unique_ptr<Strategy> inner_;
  PrivacyOptions options_;
  EpsilonTarget target_;
  GradientPath path_ = GradientPath::micro_batches;
  std::string path_description_;
  // Per trainable parameter, in order: the noise stream it draws from. 0
  // for a parameter every process of a tensor-parallel group holds the same
  // (the same noise on each copy), 1 + the rank for a rank's own shard
  // (independent noise per shard).
  std::vector<uint64_t> noise_streams_;
  Accountant accountant_;
  int64_t steps_ = 0;
  int64_t calibrated_steps_ = 0;      // the run's length the noise was calibrated to a target for
  mutable int64_t dataset_size_ = 0;  // N, learnt from the plan or fit()'s sampling calls
};

std::unique_ptr<PrivateStrategy> make_private(std::unique_ptr<Strategy> inner, PrivacyOptions options);

// Opacus's make_private_with_epsilon: the noise multiplier that spends at
// most target_epsilon over the planned steps (noise_multiplier_for, with
// options.accountant) replaces options.noise_multiplier.
std::unique_ptr<PrivateStrategy> make_private_with_epsilon(std::unique_ptr<Strategy> inner, PrivacyOptions options,
                                                           const EpsilonTarget& target);

// Steps in one epoch of Poisson sampling at rate q: round(1 / q), at least 1.
int64_t poisson_steps_per_epoch(double sample_rate);

}  // namespace cohort::privacy
