#include "cohort/torch/fit/json_lines_logger.h"

#include <chrono>

#include "cohort/torch/fit/json_lines.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class JsonLinesLogger : public Callback {
 public:
  JsonLinesLogger(std::string path, JsonLinesLoggerOptions options) : path_(std::move(path)), options_(options) {}

  std::string name() const override { return "json_lines_logger"; }

  void on_train_begin(Model& model, const Logs&) override {
    start_ = std::chrono::steady_clock::now();
    if (!model.is_chief()) return;
    const bool resumed = model.position().step > 0;
    writer_ = JsonLinesWriter(path_, options_.append || resumed);
    writer_.write(JsonObject()
                      .add("event", "start")
                      .add("strategy", model.strategy().spec())
                      .add("replicas", model.strategy().replicas_in_sync())
                      .add("epochs", model.position().epochs)
                      .add("batch_size", model.fit_options().batch_size)
                      .add("resumed", resumed)
                      .add("step", model.position().step));
  }

  void on_train_batch_end(Model& model, int64_t, const Logs& logs) override {
    if (!writer_.enabled() || options_.every_steps <= 0 || model.position().step % options_.every_steps != 0) return;
    JsonObject o;
    o.add("event", "step").add("epoch", model.position().epoch + 1).add("step", model.position().step);
    for (const auto& [k, v] : logs) o.add(k, v);
    writer_.write(o.add("lr", model.learning_rate()).add("seconds", seconds()));
  }

  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override {
    if (!writer_.enabled()) return;
    JsonObject o;
    o.add("event", "epoch").add("epoch", epoch + 1).add("step", model.position().step);
    for (const auto& [k, v] : logs) o.add(k, v);
    writer_.write(o.add("lr", model.learning_rate()).add("seconds", seconds()));
  }

  void on_train_end(Model& model, const Logs& logs) override {
    if (!writer_.enabled()) return;
    JsonObject o;
    o.add("event", "end").add("step", model.position().step).add("seconds", seconds());
    if (!model.history().stop_reason().empty()) o.add("stopped_early", model.history().stop_reason());
    for (const auto& [k, v] : logs) o.add(k, v);
    writer_.write(o);
  }

 private:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  std::string path_;
  JsonLinesLoggerOptions options_;
  JsonLinesWriter writer_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::shared_ptr<Callback> json_lines_logger(std::string path, JsonLinesLoggerOptions options) {
  return std::make_shared<JsonLinesLogger>(std::move(path), options);
}

}  // namespace cohort
