#include "cohort/torch/fit/csv_logger.h"

#include "cohort/common/check.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/output_directory.h"

namespace cohort {
namespace {

class CsvLogger : public Callback {
 public:
  explicit CsvLogger(std::string path) : path_(std::move(path)) {
    COHORT_CHECK_AS(ConfigError, !path_.empty()) << "CsvLogger: a path is required";
  }
  std::string name() const override { return "csv_logger"; }
  void on_epoch_end(Model& model, int64_t, const Logs&) override {
    if (!model.is_chief()) return;
    create_parent_directories(path_);
    model.history().write_csv(path_);
  }

 private:
  std::string path_;
};

}  // namespace

std::shared_ptr<Callback> csv_logger(std::string path) { return std::make_shared<CsvLogger>(std::move(path)); }

}  // namespace cohort
