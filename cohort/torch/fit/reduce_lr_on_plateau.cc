#include "cohort/torch/fit/reduce_lr_on_plateau.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options)
      : options_(options), monitor_(options.monitor, options.mode, options.min_delta) {
    COHORT_CHECK_AS(ConfigError, options_.factor > 0 && options_.factor < 1)
        << "ReduceLROnPlateau: factor must be in (0, 1), got " << options_.factor;
    COHORT_CHECK_AS(ConfigError, options_.patience >= 0 && options_.cooldown >= 0 && options_.min_lr >= 0)
        << "ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0";
  }

  std::string name() const override { return "reduce_lr_on_plateau"; }

  // Keras's rules, so that a configuration behaves as its users know: a
  // cooldown of k leaves k - 1 epochs unwatched after a cut.
  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override {
    const double value = monitor_.value(logs, "ReduceLROnPlateau");
    if (cooldown_ > 0) {
      --cooldown_;
      wait_ = 0;
    }
    if (monitor_.improved(value)) {
      wait_ = 0;
      return;
    }
    if (cooldown_ > 0 || ++wait_ < options_.patience) return;
    const double lr = model.learning_rate();
    if (lr <= options_.min_lr) return;
    const double reduced = std::max(lr * options_.factor, options_.min_lr);
    model.set_learning_rate(reduced);
    if (model.is_chief())
      COHORT_LOG(info) << "ReduceLROnPlateau: " << options_.monitor << " has not improved for " << wait_
                       << " epochs: learning rate " << lr << " -> " << reduced << " after epoch " << epoch + 1;
    cooldown_ = options_.cooldown;
    wait_ = 0;
  }

  void save_state(CallbackState& state) const override {
    state["wait"] = {double(wait_)};
    state["cooldown"] = {double(cooldown_)};
    monitor_.save(state, "");
  }
  void load_state(const CallbackState& state) override {
    if (auto it = state.find("wait"); it != state.end() && !it->second.empty()) wait_ = int64_t(it->second[0]);
    if (auto it = state.find("cooldown"); it != state.end() && !it->second.empty())
      cooldown_ = int64_t(it->second[0]);
    monitor_.load(state, "");
  }

 private:
  ReduceLROnPlateauOptions options_;
  Monitor monitor_;
  int64_t wait_ = 0, cooldown_ = 0;
};

}  // namespace

std::shared_ptr<Callback> reduce_lr_on_plateau(ReduceLROnPlateauOptions options) {
  return std::make_shared<ReduceLROnPlateau>(options);
}

}  // namespace cohort
