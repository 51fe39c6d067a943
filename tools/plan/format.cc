#include "tools/plan/format.h"

#include <cstdio>

namespace cohort::plan {

std::string printed(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

std::string money_text(double usd) { return printed(usd < 100 ? "$%.2f" : "$%.0f", usd); }

std::string duration_text(double s) {
  if (s < 120) return printed("%.3g s", s);
  if (s < 7200) return printed("%.1f min", s / 60);
  if (s < 3 * 86400) return printed("%.1f h", s / 3600);
  return printed("%.1f d", s / 86400);
}

std::string bytes_text(double b) {
  if (b >= double(1 << 30)) return printed("%.2f GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return printed("%.1f MiB", b / double(1 << 20));
  return printed("%.0f KiB", b / 1024);
}

}  // namespace cohort::plan
