// Seconds as cohort's options hold them (a double) and its messages print
// them: one conversion to a steady_clock duration, one text ("%g": 10, 0.5,
// 2.5e-05), so that every limit reads and behaves the same.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace cohort {

inline std::chrono::steady_clock::duration steady_seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

inline std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace cohort
