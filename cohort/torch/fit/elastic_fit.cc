// fit() in an elastic job (model.h's file comment): the epochs inside
// run_elastic() (core/elastic_state.h), whose ElasticState commits the
// training's state in memory and hands it to every member after a change.
#include <ATen/ATen.h>

#include "cohort/torch/core/elastic_state.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/fit/model.h"

namespace cohort {

bool Model::train_elastic(BatchStream& train, bool& preempted, Logs& last) {
  ElasticTraining& elastic = *strategy_.elastic();
  // A process started while the job runs joins a fit in progress: the
  // members hand it their state (ElasticState::sync()), and the callbacks'
  // restore(), collective among the processes that started the job, is not
  // for it.
  if (!elastic_joining()) callbacks_.restore(*this);
  if (position_.epoch < fit_options_.epochs) start_epoch(train);
  print_start();
  callbacks_.on_train_begin(*this, {});
  // Every step (or every elastic_commit_steps) is committed in memory: the
  // model and optimizer, the strategy's own state, the metric sums over
  // every member, the position, history, callbacks' states and the input's
  // cursor. The order of the global batches is the world's business only
  // through the split (a Dataset's rows, an input pipeline's positions), so
  // after a change the members go on with the same batches split anew: no
  // row of an epoch is skipped or trained twice.
  ElasticState state(module(), optimizer());
  // A strategy that splits the model over its processes commits its parts
  // itself (zero: each with a copy on another process).
  if (ElasticShards* shards = elastic.elastic_shards()) state.shard(*shards);
  // Only the processes that train hold its state (not parameter servers).
  state.set_group([&elastic] { return elastic.elastic_group(); });
  // A backup's partial epoch (the chief's merged sums) is everyone's total.
  epoch_metrics_ = metrics_.zeros();
  committed_metrics_ = resumed_ ? strategy_.all_sum(resumed_epoch_metrics_).clone() : metrics_.zeros();
  resumed_ = false;
  state.tally("metrics", epoch_metrics_, committed_metrics_);
  state.track(
      "strategy", [&elastic] { return elastic.own_state(); },
      [&elastic](const std::string& bytes) { elastic.load_own_state(bytes); });
  state.track(
      "fit", [this] { return elastic_progress(); }, [this](const std::string& bytes) { load_elastic_progress(bytes); });
  return run_elastic(
      state, [&] { preempted = run_epochs(train, /*epoch_started=*/false, &state, last); },
      [&elastic] { elastic.rejoin(); });
}

}  // namespace cohort
