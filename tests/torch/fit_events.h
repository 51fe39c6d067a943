// The events in fit()'s JSON-lines metrics (json_lines_logger.h), counted
// after checking that every line is valid JSON.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/json_check.h"

namespace cohort::testing {

struct FitEvents {
  int starts = 0, steps = 0, epochs = 0, ends = 0;
};

inline FitEvents count_fit_events(const std::vector<std::string>& lines) {
  FitEvents n;
  for (const auto& line : lines) {
    std::string error;
    EXPECT_TRUE(JsonCheck::valid(line, &error)) << line << ": " << error;
    n.starts += line.find(R"("event":"start")") != std::string::npos;
    n.steps += line.find(R"("event":"step")") != std::string::npos;
    n.epochs += line.find(R"("event":"epoch")") != std::string::npos;
    n.ends += line.find(R"("event":"end")") != std::string::npos;
  }
  return n;
}

}  // namespace cohort::testing
