// The folder a callback writes a file into, created on first use (as
// Keras's loggers and TensorBoard create theirs), so that
// json_lines_logger("runs/today/metrics.jsonl") works in a fresh checkout.
#pragma once

#include <string>

namespace cohort {

// Creates the directories above `path` that are missing; ConfigError naming
// the folder and why when it cannot.
void create_parent_directories(const std::string& path);

}  // namespace cohort
