#include "cohort/torch/fit/early_stopping.h"

#include <torch/serialize.h>

#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options)
      : options_(options), monitor_(options.monitor, options.mode, options.min_delta) {
    COHORT_CHECK_AS(ConfigError, options_.patience >= 0) << "EarlyStopping: patience must be >= 0";
  }

  std::string name() const override { return "early_stopping"; }

  void on_train_begin(Model&, const Logs&) override {
    if (restored_) return;  // a resumed run keeps its counters
    wait_ = 0;
    monitor_.reset();
    if (options_.baseline) monitor_.set_best(*options_.baseline);
    best_weights_.clear();
  }

  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override {
    if (epoch < options_.start_from_epoch) return;
    const double value = monitor_.value(logs, "EarlyStopping");
    if (monitor_.improved(value)) {
      wait_ = 0;
      if (options_.restore_best_weights) best_weights_ = snapshot(model);
      return;
    }
    if (++wait_ >= options_.patience && epoch > 0) {
      stopped_epoch_ = epoch;
      std::ostringstream why;
      why << "EarlyStopping: " << options_.monitor << " has not improved for " << wait_ << " epoch"
          << (wait_ == 1 ? "" : "s") << " (best " << monitor_.best() << ", last " << value << ")";
      model.stop_training(why.str());
    }
  }

  void on_train_end(Model& model, const Logs&) override {
    if (!options_.restore_best_weights || best_weights_.empty() || stopped_epoch_ < 0) return;
    torch::serialize::InputArchive archive;
    archive.load_from(best_weights_.data(), best_weights_.size());
    model.strategy().load(archive);
  }

  void save_state(CallbackState& state) const override {
    state["wait"] = {double(wait_)};
    monitor_.save(state, "");
  }
  void load_state(const CallbackState& state) override {
    if (auto it = state.find("wait"); it != state.end() && !it->second.empty()) wait_ = int64_t(it->second[0]);
    monitor_.load(state, "");
    restored_ = true;
  }

 private:
  static std::vector<char> snapshot(Model& model) {
    torch::serialize::OutputArchive archive;
    model.strategy().save(archive);
    return archive_bytes(archive);
  }

  EarlyStoppingOptions options_;
  Monitor monitor_;
  int64_t wait_ = 0;
  int64_t stopped_epoch_ = -1;
  bool restored_ = false;
  std::vector<char> best_weights_;
};

}  // namespace

std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options) {
  return std::make_shared<EarlyStopping>(options);
}

}  // namespace cohort
