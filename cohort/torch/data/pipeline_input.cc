#include "cohort/torch/data/pipeline_input.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/data/cursor.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {

PipelineInput::PipelineInput(std::shared_ptr<const data::Source> source, PipelineInputOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, source_ != nullptr) << "PipelineInput: the source is null";
  COHORT_CHECK_AS(ConfigError, !options_.input.empty()) << "PipelineInput: no input feature named";
  COHORT_CHECK_AS(ConfigError, options_.pipeline.out_of_order_window == 0)
      << "PipelineInput: fit() reads batches in order; an out_of_order_window (here "
      << options_.pipeline.out_of_order_window << ") is for loops that call Pipeline::next() themselves";
}

PipelineInput::~PipelineInput() = default;

PipelineInput& PipelineInput::map(data::MapFn fn) {
  COHORT_CHECK_AS(ConfigError, pipeline_ == nullptr) << "PipelineInput::map after the first fit()";
  maps_.push_back(std::move(fn));
  return *this;
}

int64_t PipelineInput::size() const { return int64_t(source_->size()); }

int64_t PipelineInput::start_epoch(const InputContext& context, int64_t epoch, int64_t batches_done,
                                   const std::string& resume) {
  const int world = context.num_input_pipelines, rank = context.input_pipeline_id;
  const int64_t global_batch_size = context.global_batch_size;
  COHORT_CHECK_AS(ConfigError, global_batch_size % world == 0)
      << "PipelineInput: the global batch (" << global_batch_size << ") must be a multiple of the "
      << world << " processes, so that every process's pipeline builds batches of one size";
  const int64_t local_batch = global_batch_size / world;
  if (!pipeline_ || pipeline_->options().world_size != world || pipeline_->options().rank != rank ||
      pipeline_->options().batch_size != local_batch) {
    data::PipelineOptions o = options_.pipeline;
    o.rank = rank;
    o.world_size = world;
    o.batch_size = local_batch;
    pipeline_.reset();  // its workers stop before the new pipeline's start
    pipeline_ = std::make_unique<data::Pipeline>(source_, o);
    for (const auto& fn : maps_) pipeline_->map(fn);
  }
  if (resume.empty()) {
    // A position without a cursor: a backup written while fit() read
    // something else; starting the epoch over would train on rows twice.
    COHORT_CHECK_AS(ConfigError, batches_done == 0)
        << "PipelineInput: fit() resumes at batch " << batches_done << " of epoch " << epoch
        << ", but its saved state has no pipeline cursor (was it saved by a fit() over another input?)";
    pipeline_->start(epoch);
  } else {
    const data::Cursor cursor = data::Cursor::parse(resume);
    COHORT_CHECK_AS(ConfigError, cursor.epoch <= epoch)
        << "PipelineInput: the saved cursor is in epoch " << cursor.epoch << ", fit() resumes epoch " << epoch;
    // An earlier epoch's cursor: that epoch ended (or steps_per_epoch cut
    // it) before the save, so this one starts afresh.
    if (cursor.epoch == epoch)
      pipeline_->start(cursor);
    else
      pipeline_->start(epoch);
  }
  return pipeline_->steps();
}

int64_t PipelineInput::next_rows() const {
  COHORT_CHECK(pipeline_ != nullptr) << "PipelineInput::next_rows before start_epoch";
  const int64_t b = pipeline_->delivered_batches();
  return b < pipeline_->steps() ? pipeline_->plan().batch_items(pipeline_->options().rank, b) : 0;
}

Batch PipelineInput::next() {
  COHORT_CHECK(pipeline_ != nullptr) << "PipelineInput::next before start_epoch";
  std::shared_ptr<const data::Batch> batch = pipeline_->next();
  COHORT_CHECK(batch != nullptr) << "PipelineInput::next past the epoch's " << pipeline_->steps() << " steps";
  return to_batch(std::move(batch), options_.input, options_.target);
}

std::string PipelineInput::state() const { return pipeline_ ? pipeline_->cursor().to_string() : std::string(); }

const data::Pipeline& PipelineInput::pipeline() const {
  COHORT_CHECK(pipeline_ != nullptr) << "PipelineInput::pipeline before the first fit()";
  return *pipeline_;
}

at::Tensor feature_tensor(const data::Feature& feature, std::shared_ptr<const void> owner, const std::string& name) {
  COHORT_CHECK_AS(ConfigError, !feature.is_bytes())
      << name << " is a list of byte strings (" << feature.describe()
      << "); map it to a dense array (e.g. Transform::decode_raw) before it becomes a tensor";
  auto* data = const_cast<std::byte*>(feature.raw().data());
  return torch::from_blob(data, feature.shape(), [owner = std::move(owner)](void*) {},
                          torch::TensorOptions().dtype(to_scalar_type(feature.dtype())));
}

Batch to_batch(std::shared_ptr<const data::Batch> batch, const std::string& input, const std::string& target) {
  if (batch->size() == 0) return Batch{};
  Batch out;
  out.input = feature_tensor(batch->columns.at(input), batch, input);
  if (!target.empty()) out.target = feature_tensor(batch->columns.at(target), batch, target);
  return out;
}

data::AllgatherBytes allgather_over(Strategy& strategy) {
  return [&strategy](std::span<const uint8_t> mine) {
    const at::Tensor lengths = strategy.all_gather(torch::tensor({int64_t(mine.size())}, torch::kInt64));
    const at::Tensor bytes =
        strategy.all_gather(torch::from_blob(const_cast<uint8_t*>(mine.data()), {int64_t(mine.size())}, torch::kUInt8))
            .contiguous();
    std::vector<std::vector<uint8_t>> out;
    const uint8_t* p = bytes.data_ptr<uint8_t>();
    for (int64_t i = 0; i < lengths.numel(); ++i) {
      const auto n = size_t(lengths[i].item<int64_t>());
      out.emplace_back(p, p + n);
      p += n;
    }
    return out;
  };
}

}  // namespace cohort
