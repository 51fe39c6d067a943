#include "cohort/torch/fit/learning_rate_scheduler.h"

#include "cohort/common/check.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(LrSchedule schedule) : schedule_(std::move(schedule)) {
    COHORT_CHECK_AS(ConfigError, static_cast<bool>(schedule_)) << "LearningRateScheduler: no schedule";
  }
  std::string name() const override { return "learning_rate_scheduler"; }
  void on_train_batch_begin(Model& model, int64_t, const Logs&) override {
    const FitPosition& p = model.position();
    model.set_learning_rate(schedule_({.step = p.step, .epoch = p.epoch, .steps_per_epoch = p.steps_per_epoch}));
  }

 private:
  LrSchedule schedule_;
};

}  // namespace

std::shared_ptr<Callback> learning_rate_scheduler(LrSchedule schedule) {
  return std::make_shared<LearningRateScheduler>(std::move(schedule));
}

}  // namespace cohort
