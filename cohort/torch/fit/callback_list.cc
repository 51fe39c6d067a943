#include "cohort/torch/fit/callback_list.h"

#include "cohort/common/check.h"

namespace cohort {

CallbackList::CallbackList(std::vector<std::shared_ptr<Callback>> callbacks, const std::string& owner)
    : callbacks_(std::move(callbacks)) {
  for (size_t i = 0; i < callbacks_.size(); ++i)
    COHORT_CHECK_AS(ConfigError, callbacks_[i] != nullptr) << owner << ": callback " << i + 1 << " is null";
  // A state kept by then is a state that will be saved: two of them under
  // one name would be restored into one callback, the other's lost.
  (void)save_states();
}

void CallbackList::restore(Model& model) { each(&Callback::restore, model); }
void CallbackList::on_train_begin(Model& model, const Logs& logs) { each(&Callback::on_train_begin, model, logs); }
void CallbackList::on_train_end(Model& model, const Logs& logs) { each(&Callback::on_train_end, model, logs); }
void CallbackList::on_epoch_begin(Model& model, int64_t epoch, const Logs& logs) {
  each(&Callback::on_epoch_begin, model, epoch, logs);
}
void CallbackList::on_epoch_end(Model& model, int64_t epoch, const Logs& logs) {
  each(&Callback::on_epoch_end, model, epoch, logs);
}
void CallbackList::on_train_batch_begin(Model& model, int64_t batch, const Logs& logs) {
  each(&Callback::on_train_batch_begin, model, batch, logs);
}
void CallbackList::on_train_batch_end(Model& model, int64_t batch, const Logs& logs) {
  each(&Callback::on_train_batch_end, model, batch, logs);
}
void CallbackList::on_test_begin(Model& model, const Logs& logs) { each(&Callback::on_test_begin, model, logs); }
void CallbackList::on_test_end(Model& model, const Logs& logs) { each(&Callback::on_test_end, model, logs); }
void CallbackList::on_test_batch_end(Model& model, int64_t batch, const Logs& logs) {
  each(&Callback::on_test_batch_end, model, batch, logs);
}
void CallbackList::on_predict_begin(Model& model, const Logs& logs) { each(&Callback::on_predict_begin, model, logs); }
void CallbackList::on_predict_batch_end(Model& model, int64_t batch, const Logs& logs) {
  each(&Callback::on_predict_batch_end, model, batch, logs);
}
void CallbackList::on_predict_end(Model& model, const Logs& logs) { each(&Callback::on_predict_end, model, logs); }
void CallbackList::on_preemption(Model& model) { each(&Callback::on_preemption, model); }

std::map<std::string, CallbackState> CallbackList::save_states() const {
  std::map<std::string, CallbackState> states;
  for (const auto& c : callbacks_) {
    CallbackState state;
    c->save_state(state);
    if (state.empty()) continue;
    COHORT_CHECK_AS(ConfigError, states.emplace(c->name(), std::move(state)).second)
        << "two callbacks that keep state are both named '" << c->name()
        << "' (their saved states would overwrite each other): give one of them another name()";
  }
  return states;
}

void CallbackList::load_states(const std::map<std::string, CallbackState>& states) {
  for (const auto& c : callbacks_) {
    const auto it = states.find(c->name());
    c->load_state(it == states.end() ? CallbackState{} : it->second);
  }
}

}  // namespace cohort
