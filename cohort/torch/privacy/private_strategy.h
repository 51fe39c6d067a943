// DP-SGD and DP-Adam as a strategy: wraps any strategy with one replica per
// process (one_device, multi_worker) and makes its training steps
// differentially private, so fit() and hand-written loops get privacy from
// the same seam they get distribution from:
//
//   auto strategy = cohort::privacy::make_private_with_epsilon(
//       cohort::make_strategy("multi_worker"),
//       {.max_grad_norm = 1, .sample_rate = 2048.0 / 60000},
//       {.target_epsilon = 3, .delta = 1e-5, .epochs = 40});
//   cohort::Model model(*strategy, net, {...});   // SGD: DP-SGD; Adam: DP-Adam
//   model.fit(train, {.epochs = 40});             // logs "epsilon" every epoch
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
  // the rate the accountant assumes.
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

class PrivateStrategy : public Strategy, private BatchSampler {
 public:
  // ConfigError for options out of range or a wrapped strategy with several
  // replicas in a process (mirrored, central_storage: not supported yet).
  PrivateStrategy(std::unique_ptr<Strategy> inner, PrivacyOptions options);

  std::string spec() const override;
  int replicas_in_sync() const override { return inner_->replicas_in_sync(); }
  int local_replicas() const override { return 1; }
  int process_count() const override { return inner_->process_count(); }
  int process_index() const override { return inner_->process_index(); }

  // Refuses modules that mix samples (BatchNorm: ConfigError naming it and
  // GroupNorm), and a tensor-parallel model over a wrapped strategy of
  // several processes (the data-parallel sum would add different shards;
  // tensor-parallel DP-SGD runs one_device on each rank of the group), then
  // prepares the wrapped strategy. Collective.
  void prepare(TrainingModel model) override;
  torch::nn::Module& module() override { return inner_->module(); }
  torch::optim::Optimizer& optimizer() override { return inner_->optimizer(); }
  // One private step (see the file comment). `global_rows` may be 0 (an
  // empty Poisson sample: the step still releases its noise). Collective.
  StepResult train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor predict(const at::Tensor& input) override { return inner_->predict(input); }
  at::Tensor all_sum(const at::Tensor& values) override { return inner_->all_sum(values); }
  at::Tensor all_gather(const at::Tensor& rows) override { return inner_->all_gather(rows); }
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

  const BatchSampler* batch_sampler() const override { return options_.poisson ? this : nullptr; }
  // Elastic jobs: as the wrapped strategy (multi_worker follows the
  // membership; zero's split state is not handled here), and only with
  // designated noise drawn from the seed: then a step redone after a loss,
  // in whatever world, draws the same noise as the first time (rank 0's,
  // keyed by the step), so the accountant's history and the step count
  // (the strategy's own state, committed with the model) count it once.
  // Split shares are keyed by the rank and the world size, and OpenSSL's
  // draws are never the same: a redo would be a second release that a
  // rolled-back accountant would not count.
  bool follows_membership() const override {
    return inner_->follows_membership() && !inner_->sharded_checkpoints() &&
           options_.noise_share == NoiseShare::designated && !options_.secure_noise;
  }
  void rejoin() override { inner_->rejoin(); }
  std::string own_state() const override;
  void load_own_state(const std::string& bytes) override;
  // {"epsilon": the budget spent so far, at options.delta}.
  std::map<std::string, double> logs() override;

  double epsilon() const { return accountant_.epsilon(options_.delta); }
  const Accountant& accountant() const { return accountant_; }
  int64_t steps() const { return steps_; }
  const PrivacyOptions& options() const { return options_; }
  GradientPath gradient_path() const { return path_; }
  // Which path each layer's per-sample gradients take, in a line
  // (describe_gradient_path()); set by prepare().
  const std::string& gradient_path_description() const { return path_description_; }
  Strategy& inner() { return *inner_; }

 private:
  int64_t steps_per_epoch(int64_t dataset_size) const override;
  // The accountant's history and the step count, as save() records them.
  void write_record(torch::serialize::OutputArchive& archive) const;
  void read_record(torch::serialize::InputArchive& archive);
  at::Tensor process_rows(int64_t dataset_size, int64_t step) const override;

  std::unique_ptr<Strategy> inner_;
  PrivacyOptions options_;
  TrainingModel model_;
  GradientPath path_ = GradientPath::micro_batches;
  std::string path_description_;
  // Per trainable parameter, in order: the noise stream it draws from. 0
  // for a parameter every process of a tensor-parallel group holds the same
  // (the same noise on each copy), 1 + the rank for a rank's own shard
  // (independent noise per shard).
  std::vector<uint64_t> noise_streams_;
  Accountant accountant_;
  int64_t steps_ = 0;
  mutable int64_t dataset_size_ = 0;  // N, learnt from fit()'s sampling calls
};

std::unique_ptr<PrivateStrategy> make_private(std::unique_ptr<Strategy> inner, PrivacyOptions options);

struct EpsilonTarget {
  double target_epsilon = 0;  // > 0
  double delta = 1e-5;        // in (0, 1); also the reported epsilon's
  int64_t epochs = 0;         // of steps_per_epoch = round(1 / q) steps; or
  int64_t steps = 0;          // steps, when epochs is 0
};

// Opacus's make_private_with_epsilon: the noise multiplier that spends at
// most target_epsilon over the planned steps (noise_multiplier_for, with
// options.accountant) replaces options.noise_multiplier.
std::unique_ptr<PrivateStrategy> make_private_with_epsilon(std::unique_ptr<Strategy> inner, PrivacyOptions options,
                                                           const EpsilonTarget& target);

// Steps in one epoch of Poisson sampling at rate q: round(1 / q), at least 1.
int64_t poisson_steps_per_epoch(double sample_rate);

}  // namespace cohort::privacy
