#include "cohort/torch/privacy/private_strategy.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/privacy/counter_hash.h"
#include "cohort/privacy/poisson_sampling.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/privacy/per_sample.h"

namespace cohort::privacy {
namespace {

// The noise's seed, apart from the sampling's: both derive from
// options.seed, but a step's noise must not be a function of whether
// example `rank` was sampled.
constexpr uint64_t kNoiseStream = 0x6e6f697365;  // "noise"


}  // namespace

int64_t poisson_steps_per_epoch(double sample_rate) {
  COHORT_CHECK_AS(ConfigError, sample_rate > 0 && sample_rate <= 1)
      << "sample rate must be in (0, 1], got " << sample_rate;
  return std::max<int64_t>(1, std::llround(1.0 / sample_rate));
}

PrivateStrategy::PrivateStrategy(std::unique_ptr<Strategy> inner, PrivacyOptions options)
    : inner_(std::move(inner)), options_(options), accountant_(options.accountant) {
  COHORT_CHECK_AS(ConfigError, inner_ != nullptr) << "private: no strategy to wrap";
  COHORT_CHECK_AS(ConfigError, !inner_->prepared()) << "private: wrap the strategy before preparing it";
  COHORT_CHECK_AS(ConfigError, inner_->local_replicas() == 1)
      << "private training runs one replica per process, and '" << inner_->spec() << "' runs "
      << inner_->local_replicas() << " in this process: use one_device or multi_worker";
  const PrivacyOptions& o = options_;
  COHORT_CHECK_AS(ConfigError, o.noise_multiplier >= 0 && std::isfinite(o.noise_multiplier))
      << "noise multiplier must be finite and non-negative, got " << o.noise_multiplier;
  COHORT_CHECK_AS(ConfigError, o.max_grad_norm > 0) << "max grad norm must be positive, got " << o.max_grad_norm;
  COHORT_CHECK_AS(ConfigError, std::isfinite(o.max_grad_norm) || o.noise_multiplier == 0)
      << "noise of sigma C needs a finite max grad norm C (sigma is " << o.noise_multiplier << ")";
  COHORT_CHECK_AS(ConfigError, o.sample_rate > 0 && o.sample_rate <= 1)
      << "sample rate must be in (0, 1], got " << o.sample_rate;
  COHORT_CHECK_AS(ConfigError, o.delta > 0 && o.delta < 1) << "delta must be in (0, 1), got " << o.delta;
}

std::string PrivateStrategy::spec() const {
  std::ostringstream s;
  s << "private:accountant=" << accountant_name(options_.accountant)
    << ",clipping=" << (options_.clipping == Clipping::flat ? "flat" : "per_layer")
    << ",max_grad_norm=" << options_.max_grad_norm << ",noise_multiplier=" << options_.noise_multiplier
    << ",poisson=" << (options_.poisson ? "true" : "false") << ",sample_rate=" << options_.sample_rate << " over "
    << inner_->spec();
  return s.str();
}

void PrivateStrategy::prepare(TrainingModel model) {
  COHORT_CHECK_AS(ConfigError, model.module != nullptr) << "private: the model has no module";
  check_private_compatible(*model.module);
  path_ = privacy::gradient_path(*model.module);
  path_description_ = describe_gradient_path(*model.module);
  COHORT_CHECK_AS(ConfigError, options_.clipping == Clipping::flat || path_ != GradientPath::micro_batches)
      << "private: per-layer clipping needs layers: a torch::nn::Sequential, or layers wrapped in "
         "cohort::PerSample; this model takes the whole-model micro-batch path";
  noise_streams_.clear();
  for (const auto& child : model.module->modules(/*include_self=*/true)) {
    COHORT_CHECK_AS(ConfigError, !splits_over_ranks(*child) || inner_->process_count() == 1)
        << "private: the model has tensor-parallel layers and '" << inner_->spec() << "' runs "
        << inner_->process_count() << " processes: its gradient sum would add different ranks' shards. Wrap "
        << "one_device on each rank of the tensor-parallel group (data parallelism across groups needs a mesh "
           "strategy)";
    const auto* split = dynamic_cast<const TensorParallelModule*>(child.get());
    for (const auto& named : child->named_parameters(/*recurse=*/false)) {
      if (!named.value().requires_grad()) continue;
      const bool sharded = split != nullptr && split->shard_spec(named.key()).dim >= 0;
      noise_streams_.push_back(sharded ? 1 + uint64_t(split->group().rank) : 0);
    }
  }
  model_ = model;
  inner_->prepare(std::move(model));
  prepared_ = true;
}

int64_t PrivateStrategy::steps_per_epoch(int64_t dataset_size) const {
  return poisson_steps_per_epoch(options_.sample_rate);
}

at::Tensor PrivateStrategy::process_rows(int64_t dataset_size, int64_t step) const {
  dataset_size_ = dataset_size;
  const std::vector<int64_t> rows =
      poisson_batch({.dataset_size = dataset_size, .sample_rate = options_.sample_rate, .seed = options_.seed}, step,
                    process_index(), process_count());
  return torch::tensor(rows, torch::kInt64);
}

StepResult PrivateStrategy::train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_AS(ConfigError, prepared_) << "private: train_step before prepare()";
  COHORT_CHECK_AS(ConfigError, global_rows >= 0 && mine.rows() <= global_rows)
      << "private: a step of " << global_rows << " global rows cannot hold this process's " << mine.rows();
  torch::nn::Module& net = module();
  const std::vector<torch::Tensor> parameters = trainable(net.parameters());
  StepResult result{.rows = mine.rows()};
  if (mine.rows() > 0) {
    const ClippedSum clipped = clipped_gradient_sum(net, model_.forward, model_.loss, mine, options_.max_grad_norm,
                                                    options_.clipping);
    result.loss_sum = clipped.loss_sum;
    result.output = clipped.output;
  }

  torch::NoGradGuard no_grad;
  // The clipped sums of every parameter in one flat buffer (a parameter the
  // forward did not reach, or a process without rows, adds zeros, so that
  // the noise and the sum cover every parameter on every process), in the
  // parameters' precision, as a non-private gradient reduction would be.
  std::vector<torch::Tensor> flat;
  for (const auto& p : parameters)
    flat.push_back(mine.rows() > 0 && p.grad().defined() ? p.grad().reshape(-1)
                                                         : torch::zeros({p.numel()}, p.options()));
  torch::Tensor total = torch::cat(flat);
  if (options_.noise_multiplier > 0) {
    // One draw per noise stream over its parameters' stretches of `total`.
    COHORT_CHECK_EQ(noise_streams_.size(), parameters.size()) << "private: the model's trainable parameters changed";
    std::map<uint64_t, std::vector<torch::Tensor>> by_stream;
    int64_t offset = 0;
    for (size_t k = 0; k < parameters.size(); ++k) {
      by_stream[noise_streams_.at(k)].push_back(total.narrow(0, offset, parameters[k].numel()));
      offset += parameters[k].numel();
    }
    for (const auto& [stream, stretches] : by_stream)
      add_noise_share(stretches,
                      {.noise_multiplier = options_.noise_multiplier,
                       .max_grad_norm = options_.max_grad_norm,
                       .rank = process_index(),
                       .world_size = process_count(),
                       .seed = counter_hash(options_.seed, kNoiseStream, stream),
                       .secure = options_.secure_noise,
                       .share = options_.noise_share},
                      steps_);
  }
  // The processes' sums and noise shares, added by the wrapped strategy.
  total = inner_->all_sum(total);
  // Poisson: the expected batch q N (the sum's sensitivity stays C whatever
  // the sample's size); fixed batches: the step's rows.
  const double normaliser = options_.poisson && dataset_size_ > 0 ? options_.sample_rate * double(dataset_size_)
                                                                   : double(global_rows);
  COHORT_CHECK_AS(ConfigError, normaliser > 0) << "private: a fixed-size step of no rows";
  total.div_(normaliser);
  int64_t offset = 0;
  for (const auto& p : parameters) {
    const int64_t n = p.numel();
    p.mutable_grad() = total.narrow(0, offset, n).view(p.sizes()).to(p.scalar_type());
    offset += n;
  }
  optimizer().step();
  accountant_.step(options_.noise_multiplier, options_.sample_rate);
  ++steps_;
  return result;
}

std::map<std::string, double> PrivateStrategy::logs() {
  return {{"epsilon", epsilon()}};
}

void PrivateStrategy::save(torch::serialize::OutputArchive& archive) {
  inner_->save(archive);
  write_record(archive);
}

void PrivateStrategy::load(torch::serialize::InputArchive& archive) {
  inner_->load(archive);
  read_record(archive);
}

std::string PrivateStrategy::own_state() const {
  torch::serialize::OutputArchive archive;
  write_record(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void PrivateStrategy::load_own_state(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "private: bad own state (" << bytes.size()
                              << " bytes): " << e.what_without_backtrace();
  }
  read_record(archive);
}

void PrivateStrategy::write_record(torch::serialize::OutputArchive& archive) const {
  torch::serialize::OutputArchive record;
  const History& history = accountant_.history();
  std::vector<double> segments;
  for (const Segment& s : history) segments.insert(segments.end(), {s.noise_multiplier, s.sample_rate, double(s.steps)});
  record.write("history", torch::tensor(segments, torch::kFloat64).reshape({int64_t(history.size()), 3}));
  record.write("steps", torch::tensor({steps_}, torch::kInt64));
  archive.write("privacy", record);
}

void PrivateStrategy::read_record(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive record;
  COHORT_CHECK_AS(ConfigError, archive.try_read("privacy", record))
      << "private: the saved state has no privacy record (it was not written by a private run), so the budget "
         "already spent on this model is unknown";
  at::Tensor segments, steps;
  try {
    record.read("history", segments);
    record.read("steps", steps);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "private: bad privacy record: " << e.what_without_backtrace();
  }
  COHORT_CHECK_AS(ConfigError, segments.dim() == 2 && segments.size(1) == 3 && steps.numel() == 1)
      << "private: bad privacy record (history " << segments.sizes() << ")";
  segments = segments.to(torch::kFloat64).contiguous();
  History history;
  for (int64_t i = 0; i < segments.size(0); ++i) {
    const double* s = segments[i].data_ptr<double>();
    history.push_back({.noise_multiplier = s[0], .sample_rate = s[1], .steps = int64_t(s[2])});
  }
  accountant_.set_history(std::move(history));
  steps_ = steps.item<int64_t>();
}

std::unique_ptr<PrivateStrategy> make_private(std::unique_ptr<Strategy> inner, PrivacyOptions options) {
  return std::make_unique<PrivateStrategy>(std::move(inner), options);
}

std::unique_ptr<PrivateStrategy> make_private_with_epsilon(std::unique_ptr<Strategy> inner, PrivacyOptions options,
                                                           const EpsilonTarget& target) {
  COHORT_CHECK_AS(ConfigError, (target.epochs > 0) != (target.steps > 0))
      << "make_private_with_epsilon: give epochs or steps (one of them, positive), got epochs " << target.epochs
      << " and steps " << target.steps;
  const int64_t steps =
      target.epochs > 0 ? target.epochs * poisson_steps_per_epoch(options.sample_rate) : target.steps;
  options.delta = target.delta;
  options.noise_multiplier = noise_multiplier_for({.target_epsilon = target.target_epsilon,
                                                   .delta = target.delta,
                                                   .sample_rate = options.sample_rate,
                                                   .steps = steps,
                                                   .accountant = options.accountant});
  return make_private(std::move(inner), options);
}

}  // namespace cohort::privacy
