// Callbacks: code that fit(), evaluate() and predict() run at the begin and
// end of training, of each epoch and of each batch (Keras's callbacks, with
// Horovod's distributed care built in).
//
// What every callback can rely on:
// - Logs at epoch end hold the metrics merged over every process ("loss",
//   "accuracy", "val_loss", ...): the same values on every rank. Logs at
//   batch end hold this process's running values for the epoch so far
//   (cheap; for progress display).
// - Decisions are agreed: a callback on any rank that calls
//   model.stop_training() stops every rank at the same step; a learning
//   rate that callbacks set on the chief at epoch end is the one every rank
//   uses. No rank waits for another that stopped.
// - Batch-level hooks cost a virtual call; there is no reason to skip them.
// - Only the chief (model.is_chief()) should print or write files; the
//   built-in callbacks do so.
// - A callback with state that must survive a restart (EarlyStopping's
//   patience, ...) saves it in save_state() and gets it back in load_state()
//   when BackupAndRestore resumes a run: fit() first calls restore() on
//   every callback (BackupAndRestore loads the saved run there, which
//   restores the others' states), then on_train_begin(). Its state is kept
//   under its name(), so two callbacks that keep state must have distinct
//   names (fit() refuses the list otherwise: callback_list.h).
// - fit(), evaluate() and predict() take their callbacks as a CallbackList
//   (callback_list.h), which runs each hook on every callback in order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cohort {

class Model;

// Named values: a batch's or an epoch's metrics.
using Logs = std::map<std::string, double>;
// A callback's state: named vectors of numbers.
using CallbackState = std::map<std::string, std::vector<double>>;

class Callback {
 public:
  virtual ~Callback() = default;
  // The key of the callback's saved state: distinct among a fit's callbacks
  // that keep state.
  virtual std::string name() const = 0;

  virtual void restore(Model& model) {}
  virtual void on_train_begin(Model& model, const Logs& logs) {}
  virtual void on_train_end(Model& model, const Logs& logs) {}
  virtual void on_epoch_begin(Model& model, int64_t epoch, const Logs& logs) {}
  virtual void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) {}
  virtual void on_train_batch_begin(Model& model, int64_t batch, const Logs& logs) {}
  virtual void on_train_batch_end(Model& model, int64_t batch, const Logs& logs) {}
  virtual void on_test_begin(Model& model, const Logs& logs) {}
  virtual void on_test_end(Model& model, const Logs& logs) {}
  virtual void on_test_batch_end(Model& model, int64_t batch, const Logs& logs) {}
  // predict(): before the first batch and after the outputs are gathered.
  virtual void on_predict_begin(Model& model, const Logs& logs) {}
  virtual void on_predict_batch_end(Model& model, int64_t batch, const Logs& logs) {}
  virtual void on_predict_end(Model& model, const Logs& logs) {}
  // Every rank agreed to stop for a preemption (SIGTERM or SIGINT) before
  // the step model.position() says; fit() returns after these calls.
  virtual void on_preemption(Model& model) {}

  virtual void save_state(CallbackState& state) const {}
  virtual void load_state(const CallbackState& state) {}
};

}  // namespace cohort
