#include "cohort/torch/strategy/zero.h"

#include <torch/torch.h>

#include <algorithm>
#include <typeinfo>
#include <unordered_map>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/elastic_shards.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/replicated_state.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/strategy/data_parallel_step.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

}  // namespace

COHORT_REGISTER_STRATEGY(
    zero,
    {.name = "zero",
     .description = "one replica per rank; optimizer state (1), gradients (2), parameters (3) split over the ranks",
     .keys = {{.name = "stage",
               .kind = Kind::word,
               .default_value = "1",
               .description = "1: optimizer state sharded; 2: and gradients; 3: and parameters (FSDP)",
               .words = {"1", "2", "3"}},
              {.name = "bucket_mb",
               .kind = Kind::integer,
               .default_value = "25",
               .description = "stages 1, 2: flat gradient buckets reduce-scattered during backward, in MiB "
                              "(stage 2 keeps two packing buffers of this size)",
               .min = 1},
              {.name = "unit_mb",
               .kind = Kind::integer,
               .default_value = "1",
               .description = "stage 3: layers gathered together, closed at this many MiB of parameters",
               .min = 1},
              {.name = "shard_group",
               .kind = Kind::integer,
               .default_value = "0",
               .description = "shard within groups of N consecutive ranks (a host's), replicate across (0: all)",
               .min = 0}},
     .model_requirements = "stage 3: a torch::nn::Sequential, or a model of one's own whose blocks are wrapped in "
                           "cohort::ShardedUnit; an optimizer that works per element (SGD, Adam, AdamW, Adagrad, "
                           "RMSprop)",
     .elastic = "without shard_group",
     .make = [](const Spec& spec) -> std::unique_ptr<Strategy> {
       return std::make_unique<ZeroStrategy>(ZeroStrategyOptions{.stage = std::stoi(spec.word("stage")),
                                                                 .bucket_bytes = spec.integer("bucket_mb") << 20,
                                                                 .unit_bytes = spec.integer("unit_mb") << 20,
                                                                 .shard_group = int(spec.integer("shard_group"))});
     }});

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

std::string ZeroStrategy::do_spec() const {
  return "zero:bucket_mb=" + std::to_string(options_.bucket_bytes >> 20) +
         ",shard_group=" + std::to_string(options_.shard_group) + ",stage=" + std::to_string(options_.stage) +
         ",unit_mb=" + std::to_string(options_.unit_bytes >> 20);
}

// Stage 3's units. A Sequential's: consecutive layers, a unit closed once
// it holds unit_bytes of trainable parameters (the auto-wrap policy by
// size); layers without parameters run with the unit before them (or the
// first unit). Another model's: its ShardedUnits.
std::vector<std::vector<size_t>> ZeroStrategy::plan_units(torch::nn::Module& module) {
  layers_.clear();
  if (typeid(module) != typeid(torch::nn::SequentialImpl)) return plan_wrapped_units(module);
  auto& sequential = dynamic_cast<torch::nn::SequentialImpl&>(module);
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

// The ShardedUnits of a model of the program's own, in registration order
// (the order they are called in), after the root: the trainable parameters
// outside every unit, when there are any.
std::vector<std::vector<size_t>> ZeroStrategy::plan_wrapped_units(torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (const at::Tensor& p : trainable(module.parameters())) index.emplace(p.unsafeGetTensorImpl(), index.size());
  COHORT_CHECK_AS(ConfigError, !index.empty()) << "zero: the model has no trainable parameters";
  std::vector<std::vector<size_t>> units;
  std::vector<bool> taken(index.size());
  wrapped_.clear();
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* unit = dynamic_cast<ShardedUnitImpl*>(item.value().get());
    if (unit == nullptr) continue;
    wrapped_.push_back(unit);
    units.emplace_back();
    for (const at::Tensor& p : trainable(unit->parameters())) {
      const size_t k = index.at(p.unsafeGetTensorImpl());
      COHORT_CHECK_AS(ConfigError, !taken[k])
          << "zero: ShardedUnit '" << item.key() << "' is inside another ShardedUnit; units cannot nest";
      taken[k] = true;
      units.back().push_back(k);
    }
    COHORT_CHECK_AS(ConfigError, !units.back().empty())
        << "zero: ShardedUnit '" << item.key() << "' has no trainable parameters";
  }
  COHORT_CHECK_AS(ConfigError, !wrapped_.empty())
      << "zero: stage 3 gathers each unit's parameters just before its forward, so it needs to know the units: a "
         "torch::nn::Sequential's layers, or blocks of a model of one's own wrapped in cohort::ShardedUnit "
         "(data_parallel/sharded_unit.h; LibTorch C++ modules have no forward hooks); this model is "
      << module.name() << " and has no ShardedUnit: wrap its blocks, or use stage 1 or 2";
  std::vector<size_t> root;
  for (size_t k = 0; k < taken.size(); ++k)
    if (!taken[k]) root.push_back(k);
  root_unit_ = !root.empty();
  if (root_unit_) units.insert(units.begin(), std::move(root));
  return units;
}

void ZeroStrategy::do_prepare() { build(/*sync_parameters=*/detail::prepare_syncs_state()); }

void ZeroStrategy::rejoin() {
  require_prepared("rejoin()");
  COHORT_CHECK_AS(ConfigError, !own_engine_ && options_.shard_group == 0)
      << "zero: only without shard_group, on cohort::init()'s world, does it follow an elastic job's "
         "membership; this is "
      << spec();
  hold_new_world();
  // The old world's blocks go (their engine is stopped); the new world's
  // are built as prepare() built them, and the elastic state's restore
  // fills them from the last commit.
  zero_.reset();
  if (options_.stage == 3) {
    // Stage 3's parameters were views of the old units' storage, which went
    // with them: the new units are built from placeholders (the restore
    // writes every block).
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : trainable(model().module->parameters())) p.set_data(at::zeros(p.sizes(), p.options()));
  }
  // The restore that follows (ElasticState::sync()) writes every rank's
  // blocks and, but at stage 3, gathers whole parameters from them: rank 0's
  // parameters are not broadcast first (a copy of the model for nothing).
  build(/*sync_parameters=*/false);
}

ElasticShards* ZeroStrategy::elastic_shards() {
  require_prepared("elastic_shards()");
  // A new training's commits: the last one's (and their files) go.
  elastic_.reset();
  elastic_ = std::make_unique<ElasticShardFiles>([this](ShardWriter& out) { write_own_records(out, {}); },
                                                 [this](const ShardedCheckpoint& in) { read_records(in); });
  return elastic_.get();
}

void ZeroStrategy::build(bool sync_parameters) {
  const TrainingModel& model = this->model();
  torch::nn::Module& module = *model.module;
  if (sync_parameters) broadcast_parameters(module, 0, engine_.get());
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
  // Stepping through a Sequential's layers replaces its forward: only when
  // that is the forward the program gave (training_model()'s).
  const bool sequential = typeid(module) == typeid(torch::nn::SequentialImpl);
  COHORT_CHECK_AS(ConfigError, options_.stage != 3 || !sequential || model.module_forward)
      << "zero: stage 3 runs a torch::nn::Sequential layer by layer, which would bypass this model's own forward "
         "function; give the module's forward (training_model()), or wrap the blocks in ShardedUnit inside a "
         "module of your own";
  if (options_.stage == 3) {
    options.units = plan_units(module);
  } else if (sequential && model.module_forward) {
    // Stages 1 and 2 step through a Sequential's layers too, to finish each
    // bucket's allgather just before its first layer runs.
    options.defer_gather = true;
    layers_.clear();
    for (torch::nn::AnyModule& layer : dynamic_cast<torch::nn::SequentialImpl&>(module)) layers_.push_back(&layer);
  }
  zero_ = std::make_unique<ZeroOptimizer>(trainable(module.parameters()), model.optimizer, options);
  names_.clear();
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) names_.push_back(item.key());
  if (options.defer_gather) {
    // The buckets each layer's parameters are in (a Sequential's parameters
    // are its layers', in order).
    size_t k = 0;
    layer_buckets_.clear();
    for (torch::nn::AnyModule* layer : layers_) {
      std::vector<size_t> buckets;
      const size_t count = trainable(layer->ptr()->parameters()).size();
      for (size_t i = 0; i < count; ++i) buckets.push_back(zero_->bucket_of(k++));
      std::sort(buckets.begin(), buckets.end());
      buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
      layer_buckets_.push_back(std::move(buckets));
    }
  }
  if (!wrapped_.empty()) {
    schedule_ = std::make_shared<ShardedUnitImpl::Schedule>(ShardedUnitImpl::Schedule{.zero = zero_.get()});
    for (size_t i = 0; i < wrapped_.size(); ++i) wrapped_[i]->bind(schedule_, int(i) + (root_unit_ ? 1 : 0));
  }
  // What a step runs: the program's model, at stage 3 with the forward
  // that brackets each unit's layers with their gathers, at stages 1 and 2
  // (a Sequential) with the one that finishes them as the layers need them.
  training_ = model;
  if (options_.stage == 3)
    training_.forward = [this](torch::nn::Module&, const at::Tensor& input) { return forward_by_units(&input); };
  else if (options.defer_gather)
    training_.forward = [this](torch::nn::Module&, const at::Tensor& input) { return forward_by_layers(input); };
}

// Stages 1 and 2 over a Sequential: the previous step's allgathers finish
// bucket by bucket as the layers reach them, overlapping the forward.
at::Tensor ZeroStrategy::forward_by_layers(const at::Tensor& input) {
  at::Tensor x = input;
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    for (size_t bucket : layer_buckets_[layer]) zero_->finish_gather(bucket);
    x = layers_[layer]->forward(x);
  }
  zero_->finish_gathers();  // buckets no layer reached
  return x;
}

// Stage 3's forward, unit by unit (run_sharded_unit: gathered, the next
// one's gather started, run, freed, gathered again by backward; the last
// stays gathered, backward starts with it). A Sequential's units are its
// layers in groups; a model of the program's own runs its own forward, its
// ShardedUnits doing the same while the schedule says a step is training,
// with the root unit gathered first and kept for the step. Without `input`
// (a rank without rows), the same collectives without the model.
at::Tensor ZeroStrategy::forward_by_units(const at::Tensor* input) {
  ZeroOptimizer& zero = *zero_;
  if (!wrapped_.empty()) {
    if (root_unit_) {
      zero.gather(0);
      zero.prefetch(1);
    }
    if (input == nullptr) {
      for (int u = root_unit_ ? 1 : 0; u < zero.units(); ++u) run_sharded_unit(zero, u, nullptr, {});
      return {};
    }
    schedule_->training = true;
    schedule_->next = root_unit_ ? 1 : 0;
    struct Done {  // also when the forward throws
      ShardedUnitImpl::Schedule& schedule;
      ~Done() { schedule.training = false; }
    } done{*schedule_};
    at::Tensor output = model().forward(*model().module, *input);
    COHORT_CHECK_AS(ConfigError, schedule_->next == zero.units())
        << "zero: the model's forward ran " << schedule_->next - (root_unit_ ? 1 : 0) << " of its "
        << wrapped_.size() << " ShardedUnits: while a step trains, each unit runs once";
    return output;
  }
  at::Tensor x = input ? *input : at::Tensor();
  for (int u = 0; u < zero.units(); ++u)
    x = run_sharded_unit(zero, u, input ? &x : nullptr, [&](at::Tensor y) {
      for (size_t layer = unit_layers_[size_t(u)].first; layer < unit_layers_[size_t(u)].second; ++layer)
        y = layers_[layer]->forward(y);
      return y;
    });
  return x;
}

torch::nn::Module& ZeroStrategy::do_module() {
  zero_->finish_gathers();
  return *model().module;
}

torch::optim::Optimizer& ZeroStrategy::do_optimizer() { return zero_->shard_optimizer(); }

const ZeroOptimizer& ZeroStrategy::sharded() const {
  COHORT_CHECK_AS(ConfigError, zero_ != nullptr) << "zero: call prepare() first";
  return *zero_;
}

StepResult ZeroStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_AS(ConfigError, global_rows > 0) << "zero: a step of no rows on any rank";
  StepResult result{.rows = mine.rows()};
  if (evaluating_) zero_->release_all();
  evaluating_ = false;
  zero_->zero_grad();
  if (options_.stage == 3 && result.rows == 0) {
    forward_by_units(nullptr);  // the forward's gathers; step() runs backward's collectives
  } else {
    if (result.rows == 0) zero_->finish_gathers();  // the zero loss reads every parameter
    const at::Tensor loss = detail::data_parallel_loss(training_, mine, global_rows, process_count(), result);
    loss.backward();  // launches the buckets' reduce-scatters as their gradients complete
  }
  zero_->step();
  return result;
}

// Stage 3: the first prediction after training gathers the whole model (a
// collective: every rank predicts at least once, as fit()'s evaluation
// does), which stays until the next step; the others run on it alone.
at::Tensor ZeroStrategy::do_predict(const at::Tensor& input) {
  gather_parameters();
  return RankStrategy::do_predict(input);
}

void ZeroStrategy::gather_parameters() {
  require_prepared("gather_parameters()");
  if (options_.stage != 3) {
    zero_->finish_gathers();  // stages 1 and 2: the last step's allgathers
    return;
  }
  if (evaluating_) return;
  zero_->gather_all();
  evaluating_ = true;
}

void ZeroStrategy::do_save(torch::serialize::OutputArchive& archive) {
  // Stage 3: the archive refers to the parameters, so they stay gathered
  // until the next step (by when the caller has written it out).
  gather_parameters();
  const std::unique_ptr<torch::optim::Optimizer> full = zero_->consolidated(model().optimizer, module().parameters());
  save_replicated_state(module(), *full, archive);
}

void ZeroStrategy::do_load(torch::serialize::InputArchive& archive) {
  const std::unique_ptr<torch::optim::Optimizer> full = make_optimizer(module().parameters());
  // In place: the parameters stay views of the buckets (stage 3: gathered
  // to be written, then this rank's blocks taken from them).
  gather_parameters();
  load_replicated_state(module(), *full, archive);
  zero_->load_consolidated(*full);
  zero_->reshard();
}

std::string ZeroStrategy::save_sharded(const std::string& dir, const TrainingState& state) {
  require_prepared("save_sharded()");
  return cohort::save_sharded(dir, [&](ShardWriter& out) { write_own_records(out, state); },
                              {.engine = engine_.get()});
}

void ZeroStrategy::write_own_records(ShardWriter& out, const TrainingState& state) {
  // Buffers and frozen parameters are replicated: each rank writes 1/size.
  // Hybrid sharding: every shard group holds the same blocks; the first
  // (dp coordinate 0) writes them.
  const bool writes_blocks = groups_ == nullptr || groups_->rank(MeshAxis::dp) == 0;
  if (writes_blocks) zero_->write_shard(out, names_);
  write_model_records(out, module(), zero_->shard_optimizer(), state, process_index(), process_count(),
                      ModelParameters::frozen);
}

TrainingState ZeroStrategy::load_sharded(const std::string& dir, const std::string& id) {
  require_prepared("load_sharded()");
  return read_records(ShardedCheckpoint(dir, id));
}

TrainingState ZeroStrategy::read_records(const ShardedCheckpoint& in) {
  // The model's own records first (they check the optimizer type and the
  // shapes before anything changes), then this rank's blocks.
  const TrainingState state = read_model_records(in, module(), zero_->shard_optimizer(), ModelParameters::frozen);
  evaluating_ = false;
  zero_->read_shard(in, names_);
  return state;
}

int64_t ZeroStrategy::export_consolidated(const std::string& dir, const TrainingState& state) {
  require_prepared("export_consolidated()");
  int64_t most = 0;
  cohort::save_sharded(dir, [&](ShardWriter& out) {
    const bool writes = process_index() == 0;
    most = zero_->write_consolidated(writes ? &out : nullptr, names_);
    if (writes) write_model_records(out, module(), zero_->shard_optimizer(), state, 0, 1, ModelParameters::frozen);
  }, {.single_writer = true, .engine = engine_.get()});
  return most;
}

}  // namespace cohort
