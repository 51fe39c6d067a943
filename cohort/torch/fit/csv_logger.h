// CsvLogger: the history so far as CSV (history.h), rewritten atomically by
// the chief after every epoch; a resumed run's file continues its history.
#pragma once

#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"

namespace cohort {

std::shared_ptr<Callback> csv_logger(std::string path);

}  // namespace cohort
