#include "cohort/torch/strategy/zero.h"

#include <torch/torch.h>

#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/optimizer_archive.h"
#include "cohort/torch/strategy/prepared_model.h"

namespace cohort {
namespace {

std::vector<at::Tensor> trainable(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : module.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

at::Tensor bytes_tensor(const std::string& bytes) {
  return torch::tensor(std::vector<uint8_t>(bytes.begin(), bytes.end()), torch::kUInt8);
}

}  // namespace

ZeroStrategy::ZeroStrategy(ZeroStrategyOptions options)
    : RankStrategy(options.engine, "zero strategy"), options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.stage == 1 || options_.stage == 2)
      << "zero: stage must be 1 or 2 (3 is not built yet), got " << options_.stage;
  COHORT_CHECK_AS(ConfigError, options_.bucket_bytes > 0)
      << "zero: bucket_bytes must be positive, got " << options_.bucket_bytes;
}

ZeroStrategy::~ZeroStrategy() = default;

std::string ZeroStrategy::spec() const {
  return "zero:bucket_mb=" + std::to_string(options_.bucket_bytes >> 20) + ",stage=" + std::to_string(options_.stage);
}

void ZeroStrategy::prepare(TrainingModel model) {
  detail::check_training_model(model, prepared_);
  model_ = std::move(model);
  torch::nn::Module& module = *model_.module;
  broadcast_parameters(module, 0, engine_.get());
  zero_ = std::make_unique<ZeroOptimizer>(
      trainable(module), model_.optimizer,
      ZeroOptions{.stage = options_.stage, .bucket_bytes = options_.bucket_bytes, .engine = engine_.get()});
  prepared_ = true;
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
  zero_->zero_grad();
  const at::Tensor loss = detail::data_parallel_loss(model_, mine, global_rows, process_count(), result);
  loss.backward();  // launches the buckets' reduce-scatters as their gradients complete
  zero_->step();
  return result;
}

// Collective: every rank's shard optimizer, serialised, gathered into the
// archive (the chief writes it), with the world size and the layout's size.
void ZeroStrategy::save(torch::serialize::OutputArchive& archive) {
  detail::prepared(model_, prepared_);
  torch::serialize::OutputArchive model, shard;
  module().save(model);
  save_optimizer(zero_->shard_optimizer(), shard);
  std::ostringstream bytes;
  shard.save_to(bytes);
  const at::Tensor mine = bytes_tensor(bytes.str());
  const at::Tensor lengths = all_gather(torch::tensor({mine.numel()}, torch::kInt64));
  archive.write("model", model);
  archive.write("zero_shards", all_gather(mine));
  archive.write("zero_shard_bytes", lengths);
  archive.write("zero_layout", torch::tensor({int64_t(process_count()), zero_->numel()}, torch::kInt64));
}

void ZeroStrategy::load(torch::serialize::InputArchive& archive) {
  detail::prepared(model_, prepared_);
  torch::serialize::InputArchive model;
  at::Tensor shards, lengths, layout;
  COHORT_CHECK_AS(ConfigError, archive.try_read("zero_layout", layout) && archive.try_read("zero_shards", shards) &&
                                   archive.try_read("zero_shard_bytes", lengths))
      << "zero: the saved state has no sharded optimizer state (it was not saved by the zero strategy)";
  COHORT_CHECK_AS(ConfigError, layout.numel() == 2 && layout[0].item<int64_t>() == process_count() &&
                                   layout[1].item<int64_t>() == zero_->numel())
      << "zero: the state was saved by " << layout[0].item<int64_t>() << " ranks over " << layout[1].item<int64_t>()
      << " elements; this job has " << process_count() << " ranks over " << zero_->numel()
      << " (resharding to another world size is not built yet)";
  archive.read("model", model);
  check_module_state(module(), model);
  const at::Tensor ends = lengths.cumsum(0);
  const int64_t end = ends[process_index()].item<int64_t>();
  const int64_t begin = end - lengths[process_index()].item<int64_t>();
  const at::Tensor mine = shards.narrow(0, begin, end - begin).contiguous();
  std::istringstream in(std::string(reinterpret_cast<const char*>(mine.data_ptr<uint8_t>()), size_t(mine.numel())));
  torch::serialize::InputArchive shard;
  shard.load_from(in);
  load_optimizer(zero_->shard_optimizer(), shard);
  load_module_state(module(), model);  // in place: the parameters stay views of the buckets
}

}  // namespace cohort
