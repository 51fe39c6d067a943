// PipelineInput: cohort's input pipeline (cohort/data/pipeline.h) as
// fit()'s training input, through the BatchStream seam (core/batch_stream.h).
//
//   auto source = std::make_shared<cohort::data::RecordSource>(cohort::data::list_record_files(dir));
//   cohort::PipelineInput train(source, {.input = "image", .target = "label",
//                                        .pipeline = {.order = {.seed = 7}}});
//   train.map(transform.as_map()).map(augment);
//   model.fit(train, {.epochs = 5, .batch_size = 128,
//                     .callbacks = {cohort::backup_and_restore("backup/")}});
//
// fit() gives the pipeline its place (an InputContext): rank = the input
// pipeline's id (the strategy's process_index()), world = the pipelines
// (process_count()), and each process's batch = the global batch / world, so step k of all processes is the pipeline's
// global batch k (by record: positions [kB, (k+1)B) of the epoch's order, whatever the number of processes). The
// pipeline's cursor is the stream's state, so a backup taken by BackupAndRestore resumes mid-epoch exactly once, on the
// same or another number of processes (the cursor re-deals what is left);
// an elastic fit commits it with the rest of its state, and after a change
// start_epoch() builds the pipeline again for the new world from the
// commit's cursor.
// Each step's batch is built ahead by the pipeline's workers, under its
// memory bound; the maps draw their random numbers per sample
// (SampleRng), so what a step trains on does not depend on the process
// count, the worker count or timing.
//
// Requirements, each a ConfigError when broken: the global batch is a
// multiple of the process count; no out-of-order window (fit() consumes in
// order, and needs each step's row count before reading it); the features
// named `input` and `target` are dense after the maps.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/data/batch.h"
#include "cohort/data/gather_bytes.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/source.h"
#include "cohort/torch/data/batch_stream.h"

namespace cohort {

struct PipelineInputOptions {
  std::string input = "image";   // the feature that becomes Batch::input
  std::string target = "label";  // ... Batch::target; empty: no target
  // Order, workers, prefetch, memory bound, bad-record policy. rank,
  // world_size and batch_size are fit()'s to set (see above).
  data::PipelineOptions pipeline;
};

class PipelineInput final : public BatchStream {
 public:
  PipelineInput(std::shared_ptr<const data::Source> source, PipelineInputOptions options = {});
  ~PipelineInput() override;

  // Adds a per-sample map (pipeline.h's map()); before the first fit().
  PipelineInput& map(data::MapFn fn);

  int64_t size() const override;
  int64_t start_epoch(const InputContext& context, int64_t epoch, int64_t batches_done,
                      const std::string& resume) override;
  int64_t next_rows() const override;
  Batch next() override;
  std::string state() const override;  // the pipeline's cursor (cursor.h's text form)

  // The pipeline of the current fit (stats(), autotune_log()); Error before
  // the first start_epoch().
  const data::Pipeline& pipeline() const;

 private:
  std::shared_ptr<const data::Source> source_;
  PipelineInputOptions options_;
  std::vector<data::MapFn> maps_;
  std::unique_ptr<data::Pipeline> pipeline_;
};

// A dense feature as a tensor over the same bytes (no copy); `owner` (the
// batch or sample that holds the feature) lives as long as the tensor.
// ConfigError for a bytes feature.
at::Tensor feature_tensor(const data::Feature& feature, std::shared_ptr<const void> owner,
                          const std::string& name = "feature");

// A pipeline batch as fit()'s Batch: the `input` and `target` features as
// tensors sharing the batch's storage (Batch{} for a batch of 0 rows).
Batch to_batch(std::shared_ptr<const data::Batch> batch, const std::string& input, const std::string& target);

// The analyzers' merge (cohort/data/gather_bytes.h) over a strategy's
// processes: every process's bytes, on every process, through all_gather().
// Collective, like the strategy's other calls.
data::AllgatherBytes allgather_over(Strategy& strategy);

}  // namespace cohort
