#include "cohort/torch/fit/tensorboard.h"

#include <chrono>
#include <map>
#include <optional>

#include "cohort/common/check.h"
#include "cohort/tensorboard/run_writer.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class TensorBoard : public Callback {
 public:
  TensorBoard(std::string logdir, TensorBoardOptions options) : logdir_(std::move(logdir)), options_(options) {
    COHORT_CHECK_AS(ConfigError, !logdir_.empty()) << "tensorboard: a log directory is required";
    COHORT_CHECK_AS(ConfigError, options_.update_freq >= 0)
        << "tensorboard: update_freq must be 0 (epoch scalars only) or a number of steps, not " << options_.update_freq;
  }

  std::string name() const override { return "tensorboard"; }

  void on_train_begin(Model& model, const Logs&) override {
    last_summary_step_ = model.position().step;
    last_summary_time_ = Clock::now();
  }

  void on_epoch_begin(Model& model, int64_t, const Logs&) override {
    epoch_start_step_ = model.position().step;
    epoch_start_time_ = Clock::now();
  }

  void on_train_batch_end(Model& model, int64_t, const Logs& logs) override {
    const int64_t step = model.position().step;
    if (options_.update_freq == 0 || step % options_.update_freq != 0 || !chief(model)) return;
    tfevents::RunWriter& train = run(train_, "train");
    for (const auto& [key, value] : logs) train.add_scalar("batch_" + key, step, value);
    const Clock::time_point now = Clock::now();
    if (options_.write_steps_per_second && step > last_summary_step_)
      train.add_scalar("batch_steps_per_second", step,
                       double(step - last_summary_step_) / seconds_between(last_summary_time_, now));
    last_summary_step_ = step;
    last_summary_time_ = now;
    train.flush();
  }

  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override {
    if (!chief(model)) return;
    std::map<std::string, double> extra = {{"epoch_learning_rate", model.learning_rate()}};
    const int64_t steps = model.position().step - epoch_start_step_;
    if (options_.write_steps_per_second && steps > 0)
      extra["epoch_steps_per_second"] = double(steps) / seconds_between(epoch_start_time_, Clock::now());
    // Every rank's step accounting over the epoch (model.h's epoch_ranks()),
    // so that TensorBoard shows which rank the others wait for.
    for (const telemetry::RankSample& r : model.epoch_ranks()) {
      const std::string prefix = "rank_" + std::to_string(r.rank) + "/";
      extra[prefix + "step_time_ms"] = r.step_ms;
      extra[prefix + "compute_ms"] = r.compute_ms;
      extra[prefix + "peer_wait_ms"] = r.peer_wait_ms;
      extra[prefix + "transfer_ms"] = r.transfer_ms;
      extra[prefix + "input_ms"] = r.input_ms;
      extra[prefix + "samples_per_second"] = r.samples_per_s;
    }
    for (const auto& [key, value] : logs) {
      if (key.starts_with("val_")) run(validation_, "validation").add_scalar("epoch_" + key.substr(4), epoch, value);
      else run(train_, "train").add_scalar("epoch_" + key, epoch, value);
    }
    write_extra_epoch_scalars(epoch, extra);
    flush();
  }

  void on_preemption(Model&) override { flush(); }
  void on_train_end(Model&, const Logs&) override { flush(); }

 private:
  // Scalars beside the epoch's logs, in the train run under the tags given:
  // the learning rate, steps per second and the per-rank accounting.
  void write_extra_epoch_scalars(int64_t epoch, const std::map<std::string, double>& values) {
    tfevents::RunWriter& train = run(train_, "train");
    for (const auto& [tag, value] : values) train.add_scalar(tag, epoch, value);
  }

  // Whether this process writes. One that is not the chief drops its
  // writers, so that it reads the runs afresh if it becomes the chief again
  // (an elastic change) after another process wrote.
  bool chief(const Model& model) {
    if (model.is_chief()) return true;
    train_.reset();
    validation_.reset();
    return false;
  }

  // The run's writer, made when this process first writes as the chief.
  tfevents::RunWriter& run(std::optional<tfevents::RunWriter>& writer, const char* name) {
    if (!writer) writer.emplace(logdir_ + "/" + name);
    return *writer;
  }

  void flush() {
    if (train_) train_->flush();
    if (validation_) validation_->flush();
  }

  std::string logdir_;
  TensorBoardOptions options_;
  std::optional<tfevents::RunWriter> train_, validation_;
  int64_t epoch_start_step_ = 0, last_summary_step_ = 0;
  Clock::time_point epoch_start_time_ = Clock::now(), last_summary_time_ = Clock::now();
};

}  // namespace

std::shared_ptr<Callback> tensorboard(std::string logdir, TensorBoardOptions options) {
  return std::make_shared<TensorBoard>(std::move(logdir), options);
}

}  // namespace cohort
