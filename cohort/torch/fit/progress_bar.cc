#include "cohort/torch/fit/progress_bar.h"

#include <chrono>
#include <optional>

#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions options)
      : options_(options), style_(parse_progress_style(options.style, options.out)) {}

  std::string name() const override { return "progress_bar"; }

  void on_epoch_begin(Model& model, int64_t epoch, const Logs&) override {
    if (!model.is_chief()) return;
    char label[64];
    std::snprintf(label, sizeof label, "[epoch %lld/%lld]", (long long)epoch + 1,
                  (long long)model.position().epochs);
    const int64_t batch = model.fit_options().batch_size;
    progress_.emplace(options_.out, style_, label, model.position().steps_per_epoch, batch);
    start_ = std::chrono::steady_clock::now();
    first_step_ = model.position().step;
  }

  void on_train_batch_end(Model& model, int64_t batch, const Logs& logs) override {
    if (!progress_) return;
    auto it = logs.find("loss");
    progress_->update(batch + 1, it == logs.end() ? 0.0 : it->second);
  }

  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override {
    if (!progress_) return;
    progress_->finish();
    progress_.reset();
    if (style_ == ProgressStyle::none) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double samples = double(model.position().step - first_step_) * double(model.fit_options().batch_size);
    std::string line = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(model.position().epochs) + ":";
    char buf[64];
    bool first = true;
    for (const auto& [key, value] : logs) {
      std::snprintf(buf, sizeof buf, "%s %s %.4f", first ? "" : ",", key.c_str(), value);
      line += buf;
      first = false;
    }
    std::snprintf(buf, sizeof buf, ", %s, %.0f samples/s", Progress::format_duration(seconds).c_str(),
                  seconds > 0 ? samples / seconds : 0.0);
    line += buf;
    std::fprintf(options_.out, "%s\n", line.c_str());
    std::fflush(options_.out);
  }

 private:
  ProgressBarOptions options_;
  ProgressStyle style_;
  std::optional<Progress> progress_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = 0;
};

}  // namespace

std::shared_ptr<Callback> progress_bar(ProgressBarOptions options) {
  return std::make_shared<ProgressBar>(options);
}

}  // namespace cohort
