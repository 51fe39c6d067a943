// Seconds as cohortrun's messages print them: "%g" (10, 0.5, 2.5e-05).
#pragma once

#include <cstdio>
#include <string>

namespace cohort::launcher {

inline std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace cohort::launcher
