// History as a picture: the curves of a fit() run drawn to PNG through
// cohort_plot (Debian's cairo), as Keras users draw theirs with matplotlib.
//
//   const cohort::History history = model.fit(...);
//   cohort::write_history_png(history, "loss.png", {"loss", "val_loss"});
//   cohort::write_history_png(history, "accuracy.png", {"accuracy", "val_accuracy"});
//
// One chart per file (x: epoch, 1-based; y: the keys' values), a line per key
// that the history has; epochs without a value (validation every k-th epoch)
// are gaps. ConfigError when none of `keys` is in the history or the file
// cannot be written.
#pragma once

#include <string>
#include <vector>

#include "cohort/plot/figure.h"
#include "cohort/torch/fit/history.h"

namespace cohort {

// The chart write_history_png() draws, for callers that add to it (a
// reference curve, limits) before plot::write_png().
plot::Figure history_figure(const History& history, const std::vector<std::string>& keys,
                            const std::string& title = "");

void write_history_png(const History& history, const std::string& path, const std::vector<std::string>& keys,
                       const std::string& title = "");

// The keys of a chart of `metric` and its validation twin, when the history
// has them: history_keys(h, "loss") is {"loss", "val_loss"}.
std::vector<std::string> history_keys(const History& history, const std::string& metric);

}  // namespace cohort
