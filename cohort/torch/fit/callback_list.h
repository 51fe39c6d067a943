// CallbackList: the callbacks of one fit(), evaluate() or predict() as one
// (Keras's CallbackList). It owns what every call site would otherwise
// repeat: the checks (no callback is null; callbacks that keep state have
// distinct names, the keys of their saved states), the fan-out of each hook
// to every callback in order, and their states for a saved fit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/fit/callback.h"

namespace cohort {

class Model;

class CallbackList {
 public:
  CallbackList() = default;
  // ConfigError naming `owner` ("fit", "evaluate", "predict") when one is
  // null, and the name shared when two callbacks that keep state share it.
  CallbackList(std::vector<std::shared_ptr<Callback>> callbacks, const std::string& owner);

  bool empty() const { return callbacks_.empty(); }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }

  void restore(Model& model);
  void on_train_begin(Model& model, const Logs& logs);
  void on_train_end(Model& model, const Logs& logs);
  void on_epoch_begin(Model& model, int64_t epoch, const Logs& logs);
  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs);
  void on_train_batch_begin(Model& model, int64_t batch, const Logs& logs);
  void on_train_batch_end(Model& model, int64_t batch, const Logs& logs);
  void on_test_begin(Model& model, const Logs& logs);
  void on_test_end(Model& model, const Logs& logs);
  void on_test_batch_end(Model& model, int64_t batch, const Logs& logs);
  void on_predict_begin(Model& model, const Logs& logs);
  void on_predict_batch_end(Model& model, int64_t batch, const Logs& logs);
  void on_predict_end(Model& model, const Logs& logs);
  void on_preemption(Model& model);

  // Every callback's state that is not empty, by name (ConfigError when two
  // share a name: one would overwrite the other).
  std::map<std::string, CallbackState> save_states() const;
  // Each callback's state from `states` by name (empty where absent, so a
  // callback added since the save starts afresh).
  void load_states(const std::map<std::string, CallbackState>& states);

 private:
  // Calls `hook` on every callback, in order.
  template <typename... Params, typename... Args>
  void each(void (Callback::*hook)(Params...), Args&&... args) {
    for (const auto& c : callbacks_) ((*c).*hook)(args...);
  }

  std::vector<std::shared_ptr<Callback>> callbacks_;
};

}  // namespace cohort
