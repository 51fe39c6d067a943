// ProgressBar: the chief's view of training: a redrawn bar per epoch on a
// terminal (cohortrun gives ranks one), plain lines otherwise, and a summary
// line per epoch with the merged metrics. Other ranks print nothing.
//
//   [epoch 1/2] [#########.........] 450/938  loss 0.512  6210 samples/s  ETA 8s
//   epoch 1/2: loss 0.5120, accuracy 0.8120, val_loss 0.4410, val_accuracy 0.8420, 9s, 6180 samples/s
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/progress.h"

namespace cohort {

struct ProgressBarOptions {
  std::string style = "auto";  // auto (bar on a terminal, else lines), bar, lines, none
  std::FILE* out = stdout;
};

std::shared_ptr<Callback> progress_bar(ProgressBarOptions options = {});

}  // namespace cohort
