#include "cohort/torch/fit/terminate_on_nan.h"

#include <cmath>
#include <sstream>

#include "cohort/common/logging.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

class TerminateOnNaN : public Callback {
 public:
  std::string name() const override { return "terminate_on_nan"; }
  void on_train_batch_end(Model& model, int64_t batch, const Logs& logs) override {
    auto it = logs.find("loss");
    if (it == logs.end() || std::isfinite(it->second) || model.stop_requested()) return;
    std::ostringstream why;
    why << "TerminateOnNaN: the loss is " << it->second << " at batch " << batch + 1 << " of epoch "
        << model.position().epoch + 1;
    COHORT_LOG(warn) << why.str() << ": stopping";
    model.stop_training(why.str());
  }
};

}  // namespace

std::shared_ptr<Callback> terminate_on_nan() { return std::make_shared<TerminateOnNaN>(); }

}  // namespace cohort
