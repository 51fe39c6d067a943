#include "cohort/torch/fit/history_plot.h"

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort {

std::vector<std::string> history_keys(const History& history, const std::string& metric) {
  const std::vector<std::string> present = history.keys();
  std::vector<std::string> keys;
  for (const std::string& key : {metric, "val_" + metric})
    if (std::find(present.begin(), present.end(), key) != present.end()) keys.push_back(key);
  return keys;
}

plot::Figure history_figure(const History& history, const std::vector<std::string>& keys,
                            const std::string& title) {
  const std::vector<std::string> present = history.keys();
  plot::Figure figure;
  figure.title = title;
  figure.x = {.label = "epoch"};
  figure.y = {.label = keys.size() == 1 ? keys.front() : "value"};
  std::vector<double> epochs;
  for (int64_t e : history.epochs()) epochs.push_back(static_cast<double>(e + 1));  // 1-based, as the CSV
  // Epochs are whole: a tick at each while there are few (no "epoch 1.2").
  if (epochs.size() <= 12) figure.x.ticks = epochs;
  for (const std::string& key : keys) {
    if (std::find(present.begin(), present.end(), key) == present.end()) continue;
    // NaN marks an epoch without the key; the plot skips non-finite points.
    figure.series.push_back({.label = key, .x = epochs, .y = history.values(key)});
  }
  if (figure.series.empty()) {
    std::string has;
    for (const std::string& key : present) has += (has.empty() ? "" : ", ") + key;
    COHORT_THROW(ConfigError) << "write_history_png: none of the keys asked for is in the history (it has "
                              << (has.empty() ? "nothing" : has) << ")";
  }
  return figure;
}

void write_history_png(const History& history, const std::string& path, const std::vector<std::string>& keys,
                       const std::string& title) {
  const plot::Figure figure = history_figure(history, keys, title);
  plot::write_png(figure, path);  // atomically: readers see the old picture or the new one
}

}  // namespace cohort
