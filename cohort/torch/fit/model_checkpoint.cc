#include "cohort/torch/fit/model_checkpoint.h"

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/checkpoint_writer.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::string path, ModelCheckpointOptions options)
      : path_(std::move(path)), options_(options), monitor_(options.monitor, options.mode, 0) {
    COHORT_CHECK_AS(ConfigError, !path_.empty()) << "ModelCheckpoint: a path is required";
    COHORT_CHECK_AS(ConfigError, options_.every_steps >= 0) << "ModelCheckpoint: every_steps must be >= 0";
  }

  std::string name() const override { return "model_checkpoint"; }

  void on_train_batch_end(Model& model, int64_t, const Logs&) override {
    if (options_.every_steps > 0 && model.position().step % options_.every_steps == 0) save(model);
  }

  void on_epoch_end(Model& model, int64_t, const Logs& logs) override {
    if (options_.every_steps > 0) return;
    if (options_.save_best_only && !monitor_.improved(monitor_.value(logs, "ModelCheckpoint"))) return;
    save(model);
  }

  void save_state(CallbackState& state) const override { monitor_.save(state, ""); }
  void load_state(const CallbackState& state) override { monitor_.load(state, ""); }

 private:
  void save(Model& model) {
    const FitPosition& p = model.position();
    const TrainingState state{.epoch = p.epoch, .batch = p.batch, .step = p.step, .seed = model.fit_options().seed};
    if (ShardedCheckpoints* sharded = model.strategy().sharded_checkpoints(); sharded && sharded->saves_sharded()) {
      sharded->save_sharded(path_, state);  // a directory, every process its part
      return;
    }
    write_chief_checkpoint(model, path_, [&](torch::serialize::OutputArchive& archive) {
      model.strategy().save(archive);
      save_training_state(archive, state);
    });
  }

  std::string path_;
  ModelCheckpointOptions options_;
  Monitor monitor_;
};

}  // namespace

std::shared_ptr<Callback> model_checkpoint(std::string path, ModelCheckpointOptions options) {
  return std::make_shared<ModelCheckpoint>(std::move(path), options);
}

}  // namespace cohort
