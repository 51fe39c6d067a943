#include "cohort/torch/strategy/zero.h"

#include <torch/torch.h>

#include <typeinfo>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/strategy/prepared_model.h"
#include "cohort/torch/strategy/single_process.h"

namespace cohort {

ZeroStrategy::ZeroStrategy(ZeroStrategyOptions options)
    : RankStrategy(options.engine, "zero strategy"), options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.stage >= 1 && options_.stage <= 3)
      << "zero: stage must be 1, 2 or 3, got " << options_.stage;
  COHORT_CHECK_AS(ConfigError, options_.shard_group >= 0)
      << "zero: shard_group must not be negative, got " << options_.shard_group;
  COHORT_CHECK_AS(ConfigError, options_.bucket_bytes > 0 && options_.unit_bytes > 0)
      << "zero: bucket_bytes and unit_bytes must be positive, got " << options_.bucket_bytes << " and "
      << options_.unit_bytes;
}

ZeroStrategy::~ZeroStrategy() = default;

std::string ZeroStrategy::spec() const {
  return "zero:bucket_mb=" + std::to_string(options_.bucket_bytes >> 20) +
         ",shard_group=" + std::to_string(options_.shard_group) + ",stage=" + std::to_string(options_.stage) +
         ",unit_mb=" + std::to_string(options_.unit_bytes >> 20);
}

// Stage 3's units: consecutive layers of the Sequential, a unit closed once
// it holds unit_bytes of trainable parameters (the auto-wrap policy by
// size); layers without parameters run with the unit before them (or the
// first unit).
std::vector<std::vector<size_t>> ZeroStrategy::plan_units(torch::nn::Module& module) {
  COHORT_CHECK_AS(ConfigError, typeid(module) == typeid(torch::nn::SequentialImpl))
      << "zero: stage 3 gathers each unit's parameters just before its forward, which needs a model it can step "
         "through (a torch::nn::Sequential; LibTorch C++ modules have no forward hooks); this model is "
      << module.name() << ": use stage 1 or 2";
  auto& sequential = dynamic_cast<torch::nn::SequentialImpl&>(module);
  layers_.clear();
  for (torch::nn::AnyModule& layer : sequential) layers_.push_back(&layer);
  std::vector<std::vector<size_t>> units(1);
  unit_layers_.assign(1, {0, 0});
  size_t index = 0;
  int64_t bytes = 0;
  for (size_t layer = 0; layer < sequential.size(); ++layer) {
    if (!units.back().empty() && bytes >= options_.unit_bytes) {
      units.emplace_back();
      unit_layers_.push_back({layer, layer});
      bytes = 0;
    }
    for (const at::Tensor& p : layers_[layer]->ptr()->parameters()) {
      if (!p.requires_grad()) continue;
      units.back().push_back(index++);
      bytes += int64_t(p.numel()) * p.element_size();
    }
    unit_layers_.back().second = layer + 1;
  }
  COHORT_CHECK_AS(ConfigError, !units.back().empty()) << "zero: the model has no trainable parameters";
  return units;
}

void ZeroStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  torch::nn::Module& module = *model_.module;
  broadcast_parameters(module, 0, engine_.get());
  ZeroOptions options{.stage = options_.stage, .bucket_bytes = options_.bucket_bytes, .engine = engine_.get()};
  const int world = process_count(), group = options_.shard_group;
  if (group > 0 && group != world) {
    COHORT_CHECK_AS(ConfigError, world % group == 0)
        << "zero: shard_group " << group << " does not divide the " << world << " ranks";
    COHORT_CHECK_AS(ConfigError, options_.engine == nullptr)
        << "zero: shard_group splits cohort::init()'s world; this strategy was given an engine of its own";
    groups_ = std::make_unique<Mesh>(MeshShape{.dp = world / group, .pp = 1, .tp = group},
                                     MeshOptions{.label = "zero"});
    options.engine = &groups_->engine(MeshAxis::tp);
    options.replica_engine = &groups_->engine(MeshAxis::dp);
  }
  if (options_.stage == 3) options.units = plan_units(module);
  zero_ = std::make_unique<ZeroOptimizer>(trainable(module.parameters()), model_.optimizer, options);
  // What a step runs: the program's model, at stage 3 with the forward
  // that brackets each unit's layers with their gathers.
  training_ = model_;
  if (options_.stage == 3)
    training_.forward = [this](torch::nn::Module&, const at::Tensor& input) { return forward_by_units(&input); };
  prepared_ = true;
}

// Stage 3's forward, unit by unit: gather (the next unit's gather starts
// before this one computes), run its layers, free it, and hook its output
// so that backward gathers it again just before it is needed. The last unit
// stays gathered: backward starts with it. Without `input` (a rank without
// rows), the same collectives without the layers.
at::Tensor ZeroStrategy::forward_by_units(const at::Tensor* input) {
  const int units = zero_->units();
  at::Tensor x = input ? *input : at::Tensor();
  for (int u = 0; u < units; ++u) {
    zero_->gather(u);
    if (u + 1 < units) zero_->prefetch(u + 1);
    if (input)
      for (size_t layer = unit_layers_[size_t(u)].first; layer < unit_layers_[size_t(u)].second; ++layer)
        x = layers_[layer]->forward(x);
    if (u + 1 == units) break;
    zero_->release(u);
    if (input && x.requires_grad())
      x.register_hook([zero = zero_.get(), u](const at::Tensor& grad) {
        zero->gather(u);
        return grad;
      });
  }
  return x;
}

torch::optim::Optimizer& ZeroStrategy::optimizer() {
  detail::prepared(model_, prepared_);
  return zero_->shard_optimizer();
}

const ZeroOptimizer& ZeroStrategy::sharded() const {
  COHORT_CHECK_AS(ConfigError, zero_ != nullptr) << "zero: call prepare() first";
  return *zero_;
}

StepResult ZeroStrategy::train_step(const Batch& mine, int64_t global_rows) {
  detail::prepared(model_, prepared_);
  COHORT_CHECK_AS(ConfigError, global_rows > 0 && mine.rows() <= global_rows)
      << "zero: a step of " << global_rows << " global rows cannot hold this rank's " << mine.rows();
  StepResult result{.rows = mine.rows()};
  if (evaluating_) zero_->release_all();
  evaluating_ = false;
  zero_->zero_grad();
  if (options_.stage == 3 && result.rows == 0) {
    forward_by_units(nullptr);  // the forward's gathers; step() runs backward's collectives
  } else {
    const at::Tensor loss = detail::data_parallel_loss(training_, mine, global_rows, process_count(), result);
    loss.backward();  // launches the buckets' reduce-scatters as their gradients complete
  }
  zero_->step();
  return result;
}

// Stage 3: the first prediction after training gathers the whole model (a
// collective: every rank predicts at least once, as fit()'s evaluation
// does), which stays until the next step; the others run on it alone.
at::Tensor ZeroStrategy::predict(const at::Tensor& input) {
  gather_parameters();
  return RankStrategy::predict(input);
}

void ZeroStrategy::gather_parameters() {
  detail::prepared(model_, prepared_);
  if (options_.stage != 3 || evaluating_) return;
  zero_->gather_all();
  evaluating_ = true;
}

// Collective: the full model and the consolidated optimizer, in the form
// multi_worker and one_device save (detail::save_replicated), so the
// checkpoint loads into them too, and into zero at any world size.
void ZeroStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::prepared(model_, prepared_);
  // Stage 3: the archive refers to the parameters, so they stay gathered
  // until the next step (by when the caller has written it out).
  gather_parameters();
  const std::unique_ptr<torch::optim::Optimizer> full = zero_->consolidated(model_.optimizer, module().parameters());
  detail::save_replicated(module(), *full, archive);
}

void ZeroStrategy::load(torch::serialize::InputArchive& archive) {
  detail::prepared(model_, prepared_);
  const std::unique_ptr<torch::optim::Optimizer> full = detail::make_optimizer(model_, module().parameters());
  // In place: the parameters stay views of the buckets (stage 3: gathered
  // to be written, then this rank's blocks taken from them).
  gather_parameters();
  detail::load_replicated(module(), *full, archive);
  zero_->load_consolidated(*full);
  zero_->reshard();
}

// The names of the parameters ZeroOptimizer holds, in its order (the
// module's, trainable ones only).
std::vector<std::string> ZeroStrategy::trainable_names() {
  std::vector<std::string> names;
  for (const auto& item : module().named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) names.push_back(item.key());
  return names;
}

bool ZeroStrategy::is_trainable(const std::string& name) {
  const at::Tensor* p = module().named_parameters(true).find(name);
  return p != nullptr && p->requires_grad();
}

void ZeroStrategy::save_sharded(const std::string& dir, const TrainingState& state) {
  detail::prepared(model_, prepared_);
  const std::vector<std::string> names = trainable_names();
  const int rank = process_index(), size = process_count();
  // Buffers and frozen parameters are replicated: each rank writes 1/size.
  cohort::save_sharded(dir, [&](ShardWriter& out) {
    zero_->write_shard(out, names);
    write_model_records(out, module(), zero_->shard_optimizer(), state, rank, size,
                        [this](const std::string& name) { return is_trainable(name); });
  }, {.engine = engine_.get()});
}

TrainingState ZeroStrategy::load_sharded(const std::string& dir) {
  detail::prepared(model_, prepared_);
  const ShardedCheckpoint in(dir);
  // The model's own records first (they check the optimizer type and the
  // shapes before anything changes), then this rank's blocks.
  const TrainingState state = read_model_records(in, module(), zero_->shard_optimizer(),
                                                 [this](const std::string& name) { return is_trainable(name); });
  evaluating_ = false;
  zero_->read_shard(in, trainable_names());
  return state;
}

int64_t ZeroStrategy::export_consolidated(const std::string& dir, const TrainingState& state) {
  detail::prepared(model_, prepared_);
  const std::vector<std::string> names = trainable_names();
  int64_t most = 0;
  cohort::save_sharded(dir, [&](ShardWriter& out) {
    const bool writes = process_index() == 0;
    most = zero_->write_consolidated(writes ? &out : nullptr, names);
    if (writes)
      write_model_records(out, module(), zero_->shard_optimizer(), state, 0, 1,
                          [this](const std::string& name) { return is_trainable(name); });
  }, {.single_writer = true, .engine = engine_.get()});
  return most;
}

}  // namespace cohort
