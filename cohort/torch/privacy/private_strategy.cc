#include "cohort/torch/privacy/private_strategy.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/privacy/counter_hash.h"
#include "cohort/privacy/poisson_sampling.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/privacy/per_sample.h"

namespace cohort::privacy {
namespace {

// The noise's seed, apart from the sampling's: both derive from
// options.seed, but a step's noise must not be a function of whether
// example `rank` was sampled.
constexpr uint64_t kNoiseStream = 0x6e6f697365;  // "noise"

using Kind = SpecKey::Kind;

SpecKey optional_number(const char* name, const char* description) {
  return {.name = name, .kind = Kind::number, .description = description, .optional = true};
}

std::unique_ptr<Strategy> wrap_private(std::unique_ptr<Strategy> inner, const Spec& spec) {
  COHORT_CHECK_AS(ConfigError, spec.has("epsilon") != spec.has("noise_multiplier"))
      << "privacy: give epsilon (the budget: the noise is calibrated to it) or noise_multiplier, "
      << (spec.has("epsilon") ? "not both" : "one of them");
  PrivacyOptions o{
      .noise_multiplier = spec.has("noise_multiplier") ? spec.number("noise_multiplier") : 0,
      .max_grad_norm = spec.number("max_grad_norm"),
      .clipping = spec.word("clipping") == "per_layer" ? Clipping::per_layer : Clipping::flat,
      .sample_rate = spec.has("sample_rate") ? spec.number("sample_rate") : 0,
      .poisson = spec.boolean("poisson"),
      .delta = spec.number("delta"),
      .accountant = parse_accountant_kind(spec.word("accountant")),
      .seed = uint64_t(spec.integer("seed")),
      .secure_noise = spec.boolean("secure_noise"),
      .noise_share = spec.word("noise_share") == "designated" ? NoiseShare::designated : NoiseShare::split};
  EpsilonTarget target;
  if (spec.has("epsilon"))
    target = {.target_epsilon = spec.number("epsilon"),
              .delta = o.delta,
              .epochs = spec.has("epochs") ? spec.integer("epochs") : 0};
  return std::make_unique<PrivateStrategy>(std::move(inner), o, target);
}

}  // namespace

COHORT_REGISTER_STRATEGY(
    privacy,
    {.name = "privacy",
     .description = "DP-SGD (DP-Adam with Adam) over the strategy before '+': clipped per-sample gradients, noise",
     .keys = {optional_number("epsilon", "the privacy budget over the run: the noise is calibrated to it"),
              optional_number("noise_multiplier", "sigma, instead of epsilon"),
              {.name = "max_grad_norm",
               .kind = Kind::number,
               .default_value = "1",
               .description = "C: each sample's gradient clipped to this norm"},
              {.name = "delta", .kind = Kind::number, .default_value = "1e-05", .description = "of (epsilon, delta)"},
              optional_number("sample_rate", "q, each example's probability per step (default: batch / rows)"),
              {.name = "epochs",
               .kind = Kind::integer,
               .description = "epsilon's run length (default: fit()'s)",
               .min = 1,
               .optional = true},
              {.name = "clipping",
               .kind = Kind::word,
               .default_value = "flat",
               .description = "flat (the whole gradient) or per_layer",
               .words = {"flat", "per_layer"}},
              {.name = "accountant",
               .kind = Kind::word,
               .default_value = "rdp",
               .description = "how epsilon is counted",
               .words = {"rdp", "prv"}},
              {.name = "poisson",
               .kind = Kind::boolean,
               .default_value = "true",
               .description = "Poisson sampling (what the accountant assumes); false: shuffled fixed batches"},
              {.name = "seed", .kind = Kind::integer, .default_value = "0", .description = "sampling and noise"},
              {.name = "secure_noise",
               .kind = Kind::boolean,
               .default_value = "false",
               .description = "OpenSSL's generator for the noise"},
              {.name = "noise_share",
               .kind = Kind::word,
               .default_value = "split",
               .description = "split over the processes, or designated (rank 0's; elastic jobs need it)",
               .words = {"split", "designated"}}},
     .model_requirements = "no BatchNorm (GroupNorm instead); the fast path: layers wrapped in cohort::PerSample, "
                           "or a torch::nn::Sequential (other layers take per-sample micro-batches)",
     .elastic = "over multi_worker, noise_share=designated, without secure_noise",
     .wrap = wrap_private});

int64_t poisson_steps_per_epoch(double sample_rate) {
  COHORT_CHECK_AS(ConfigError, sample_rate > 0 && sample_rate <= 1)
      << "sample rate must be in (0, 1], got " << sample_rate;
  return std::max<int64_t>(1, std::llround(1.0 / sample_rate));
}

PrivateStrategy::PrivateStrategy(std::unique_ptr<Strategy> inner, PrivacyOptions options, EpsilonTarget target)
    : inner_(std::move(inner)), options_(options), target_(target), accountant_(options.accountant) {
  COHORT_CHECK_AS(ConfigError, inner_ != nullptr) << "private: no strategy to wrap";
  COHORT_CHECK_AS(ConfigError, !inner_->prepared()) << "private: wrap the strategy before preparing it";
  COHORT_CHECK_AS(ConfigError, inner_->local_replicas() == 1)
      << "private training runs one replica per process, and '" << inner_->spec() << "' runs "
      << inner_->local_replicas() << " in this process: use one_device or multi_worker";
  const PrivacyOptions& o = options_;
  const bool targeted = target_.target_epsilon > 0;
  COHORT_CHECK_AS(ConfigError, target_.target_epsilon >= 0 && std::isfinite(target_.target_epsilon))
      << "target epsilon must be positive, got " << target_.target_epsilon;
  COHORT_CHECK_AS(ConfigError, target_.epochs >= 0 && target_.steps >= 0 && (target_.epochs == 0 || target_.steps == 0))
      << "privacy target: give epochs or steps (one of them, positive; neither: the training's epochs), got epochs "
      << target_.epochs << " and steps " << target_.steps;
  COHORT_CHECK_AS(ConfigError, o.noise_multiplier >= 0 && std::isfinite(o.noise_multiplier))
      << "noise multiplier must be finite and non-negative, got " << o.noise_multiplier;
  COHORT_CHECK_AS(ConfigError, o.max_grad_norm > 0) << "max grad norm must be positive, got " << o.max_grad_norm;
  COHORT_CHECK_AS(ConfigError, std::isfinite(o.max_grad_norm) || (o.noise_multiplier == 0 && !targeted))
      << "noise of sigma C needs a finite max grad norm C (sigma is "
      << (targeted ? std::string("calibrated to a budget") : std::to_string(o.noise_multiplier)) << ")";
  COHORT_CHECK_AS(ConfigError, o.sample_rate >= 0 && o.sample_rate <= 1)
      << "sample rate must be in (0, 1] (0: from the training plan), got " << o.sample_rate;
  COHORT_CHECK_AS(ConfigError, o.delta > 0 && o.delta < 1) << "delta must be in (0, 1), got " << o.delta;
  if (targeted) {
    COHORT_CHECK_AS(ConfigError, target_.delta > 0 && target_.delta < 1)
        << "delta must be in (0, 1), got " << target_.delta;
    options_.delta = target_.delta;
  }
  // Everything known now (make_private_with_epsilon with a sample rate and
  // a length): calibrated at once, so that a hand-written loop needs no plan.
  if (o.sample_rate > 0 && (!targeted || target_.epochs > 0 || target_.steps > 0)) calibrate({});
}

void PrivateStrategy::do_begin_training(const TrainingPlan& plan) { calibrate(plan); }

void PrivateStrategy::calibrate(const TrainingPlan& plan) {
  if (options_.sample_rate == 0) {
    COHORT_CHECK_AS(ConfigError, plan.dataset_size > 0 && plan.global_batch_size > 0)
        << "privacy: the sample rate is the global batch over the data set's rows, and the training plan gives "
        << plan.global_batch_size << " over " << plan.dataset_size << ": give sample_rate, or train with fit()";
    options_.sample_rate = std::min(1.0, double(plan.global_batch_size) / double(plan.dataset_size));
  }
  if (plan.dataset_size > 0) dataset_size_ = plan.dataset_size;
  if (target_.target_epsilon <= 0) return;
  const int64_t epochs = target_.epochs > 0 ? target_.epochs : plan.epochs;
  const int64_t steps = target_.steps > 0 ? target_.steps : epochs * poisson_steps_per_epoch(options_.sample_rate);
  COHORT_CHECK_AS(ConfigError, steps > 0)
      << "privacy: epsilon " << target_.target_epsilon << " is spent over the run's steps, and the run has none "
      << "(epochs " << epochs << "): give epochs in the spec, or train with fit()";
  options_.noise_multiplier = noise_multiplier_for({.target_epsilon = target_.target_epsilon,
                                                    .delta = target_.delta,
                                                    .sample_rate = options_.sample_rate,
                                                    .steps = steps,
                                                    .accountant = options_.accountant});
  calibrated_steps_ = steps;
}

void PrivateStrategy::require_calibrated(const char* call) const {
  COHORT_CHECK_AS(ConfigError, options_.sample_rate > 0 && (target_.target_epsilon <= 0 || calibrated_steps_ > 0))
      << "privacy: " << call << " before the strategy knows its sample rate and noise: they come from the "
      << "training plan (fit() gives it; a hand-written loop calls begin_training({.dataset_size = N, "
      << ".global_batch_size = B, .epochs = E}) first)";
}

std::string PrivateStrategy::do_spec() const {
  std::ostringstream s;
  s << inner_->spec() << "+privacy:accountant=" << accountant_name(options_.accountant)
    << ",clipping=" << (options_.clipping == Clipping::flat ? "flat" : "per_layer") << ",delta=" << options_.delta;
  // Calibrated, the resolved noise and rate reproduce the run; before, the target.
  if (target_.target_epsilon > 0 && calibrated_steps_ == 0) {
    s << ",epsilon=" << target_.target_epsilon;
    if (target_.epochs > 0) s << ",epochs=" << target_.epochs;
  }
  s << ",max_grad_norm=" << options_.max_grad_norm;
  if (target_.target_epsilon <= 0 || calibrated_steps_ > 0) s << ",noise_multiplier=" << options_.noise_multiplier;
  s << ",noise_share=" << (options_.noise_share == NoiseShare::split ? "split" : "designated")
    << ",poisson=" << (options_.poisson ? "true" : "false");
  if (options_.sample_rate > 0) s << ",sample_rate=" << options_.sample_rate;
  s << ",secure_noise=" << (options_.secure_noise ? "true" : "false") << ",seed=" << options_.seed;
  return s.str();
}

std::string PrivateStrategy::do_description() const {
  std::ostringstream s;
  s << spec();
  if (target_.target_epsilon > 0 && calibrated_steps_ > 0)
    s << " (noise for epsilon " << target_.target_epsilon << " at delta " << target_.delta << " over "
      << calibrated_steps_ << " steps)";
  if (prepared()) s << "; per-sample gradients by " << path_description_;
  return s.str();
}

void PrivateStrategy::do_prepare() {
  const TrainingModel& model = this->model();
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
  inner_->prepare(model);
}

int64_t PrivateStrategy::steps_per_epoch(int64_t dataset_size) const {
  require_calibrated("steps_per_epoch()");
  return poisson_steps_per_epoch(options_.sample_rate);
}

at::Tensor PrivateStrategy::process_rows(int64_t dataset_size, int64_t step) const {
  dataset_size_ = dataset_size;
  const std::vector<int64_t> rows =
      poisson_batch({.dataset_size = dataset_size, .sample_rate = options_.sample_rate, .seed = options_.seed}, step,
                    process_index(), process_count());
  return torch::tensor(rows, torch::kInt64);
}

StepResult PrivateStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  require_calibrated("train_step()");
  torch::nn::Module& net = module();
  const std::vector<torch::Tensor> parameters = trainable(net.parameters());
  StepResult result{.rows = mine.rows()};
  if (mine.rows() > 0) {
    const ClippedSum clipped =
        clipped_gradient_sum(net, model().forward, model().loss, mine, options_.max_grad_norm, options_.clipping);
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

ElasticTraining* PrivateStrategy::do_elastic() {
  ElasticTraining* inner = inner_->elastic();
  const bool follows = inner != nullptr &&
                       (!inner_->sharded_checkpoints() || !inner_->sharded_checkpoints()->saves_sharded()) &&
                       options_.noise_share == NoiseShare::designated && !options_.secure_noise;
  return follows ? this : nullptr;
}

std::map<std::string, double> PrivateStrategy::do_logs() { return {{"epsilon", epsilon()}}; }

void PrivateStrategy::do_save(torch::serialize::OutputArchive& archive) {
  inner_->save(archive);
  write_record(archive);
}

void PrivateStrategy::do_load(torch::serialize::InputArchive& archive) {
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
  COHORT_CHECK_AS(ConfigError, target.target_epsilon > 0)
      << "make_private_with_epsilon: the target epsilon must be positive, got " << target.target_epsilon;
  return std::make_unique<PrivateStrategy>(std::move(inner), options, target);
}

}  // namespace cohort::privacy
