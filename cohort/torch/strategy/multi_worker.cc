#include "cohort/torch/strategy/multi_worker.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/data_parallel/distributed_data_parallel.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "cohort/torch/strategy/data_parallel_step.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

const char* style_name(MultiWorkerOptions::Style s) {
  return s == MultiWorkerOptions::Style::ddp ? "ddp" : "horovod";
}

}  // namespace

COHORT_REGISTER_STRATEGY(
    multi_worker, {.name = "multi_worker",
                   .description = "one replica per rank, across processes and hosts (cohortrun, mpirun, srun)",
                   .keys = {{.name = "style",
                             .kind = Kind::word,
                             .default_value = "ddp",
                             .description = "gradient exchange: DDP buckets or Horovod's per-parameter allreduces",
                             .words = {"ddp", "horovod"}},
                            {.name = "compression",
                             .kind = Kind::word,
                             .default_value = "none",
                             .description = "gradients on the wire",
                             .words = {"none", "fp16", "bf16"}},
                            {.name = "bucket_mb",
                             .kind = Kind::integer,
                             .default_value = "25",
                             .description = "style=ddp: bucket size in MiB",
                             .min = 1},
                            {.name = "bucket_view",
                             .kind = Kind::boolean,
                             .default_value = "true",
                             .description = "style=ddp: gradients are views of the buckets (no copies)"}},
                   .elastic = "always",
                   .make = [](const Spec& spec) -> std::unique_ptr<Strategy> {
                     return std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{
                         .style = spec.word("style") == "horovod" ? MultiWorkerOptions::Style::horovod
                                                                  : MultiWorkerOptions::Style::ddp,
                         .compression = parse_compression(spec.word("compression")),
                         .bucket_bytes = spec.integer("bucket_mb") << 20,
                         .bucket_view = spec.boolean("bucket_view")});
                   }});

MultiWorkerStrategy::MultiWorkerStrategy(MultiWorkerOptions options)
    : RankStrategy(options.engine, "multi_worker strategy"), options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.bucket_bytes > 0)
      << "multi_worker: bucket_bytes must be positive, got " << options_.bucket_bytes;
}

MultiWorkerStrategy::~MultiWorkerStrategy() = default;

std::string MultiWorkerStrategy::do_spec() const {
  return std::string("multi_worker:bucket_mb=") + std::to_string(options_.bucket_bytes >> 20) +
         ",bucket_view=" + (options_.bucket_view ? "true" : "false") +
         ",compression=" + std::string(compression_name(options_.compression)) + ",style=" + style_name(options_.style);
}

void MultiWorkerStrategy::do_prepare() {
  optimizer_ = make_optimizer(model().module->parameters());
  connect(/*sync_state=*/detail::prepare_syncs_state());
}

void MultiWorkerStrategy::rejoin() {
  require_prepared("rejoin()");
  hold_new_world();
  // The old wrappers let go of the old world's engine (stopped by reform())
  // and of their gradient hooks before the new ones add theirs.
  ddp_.reset();
  horovod_.reset();
  // The interrupted step's gradients are not state (a commit holds none,
  // and train_step drops them before its backward): dropped now, so that
  // DDP's new buckets do not copy them in (gradient_as_bucket_view).
  zero_grad_to_none(*optimizer_);
  // run_elastic() syncs the committed state right after (ElasticState::sync():
  // the newest commit, to every member and to the new ones), so rank 0's
  // parameters and optimizer state are not broadcast first (two copies of
  // the model, most of a rejoin's time for a large one).
  connect(/*sync_state=*/false);
}

void MultiWorkerStrategy::connect(bool sync_state) {
  torch::nn::Module& module = *model().module;
  if (options_.style == MultiWorkerOptions::Style::ddp) {
    // DDP checks that every rank built the same model and, with
    // sync_state, broadcasts rank 0's parameters.
    std::shared_ptr<CommHook> hook;
    if (options_.compression == Compression::fp16) hook = fp16_compress_hook();
    COHORT_CHECK_AS(ConfigError, options_.compression != Compression::bf16)
        << "multi_worker: style=ddp compresses with fp16 only (bf16 is style=horovod's)";
    ddp_ = std::make_unique<DistributedDataParallelBase>(
        module, DistributedDataParallelOptions{.bucket_bytes = options_.bucket_bytes,
                                               .gradient_as_bucket_view = options_.bucket_view,
                                               .init_sync = sync_state,
                                               .comm_hook = hook,
                                               .engine = engine_.get()});
  } else {
    if (sync_state) broadcast_parameters(module, 0, engine_.get());
    horovod_ = std::make_unique<DistributedOptimizer>(
        *optimizer_, module.named_parameters(),
        DistributedOptimizerOptions{.compression = options_.compression, .engine = engine_.get()});
  }
  if (sync_state) broadcast_optimizer_state(*optimizer_, 0, engine_.get());
}

StepResult MultiWorkerStrategy::do_train_step(const Batch& mine, int64_t global_rows) {
  COHORT_CHECK_AS(ConfigError, global_rows > 0) << "multi_worker: a step of no rows on any rank";
  StepResult result{.rows = mine.rows()};
  if (horovod_) horovod_->zero_grad(); else zero_grad_to_none(*optimizer_);

  if (ddp_) ddp_->pre_forward();
  // The ranks' gradients are averaged: weighting each rank's mean loss by
  // its share of the rows makes the average the global batch's mean.
  const at::Tensor loss = detail::data_parallel_loss(model(), mine, global_rows, process_count(), result);
  if (ddp_) ddp_->post_forward({loss});
  loss.backward();
  if (horovod_) horovod_->step(); else optimizer_->step();
  return result;
}

}  // namespace cohort
