// Wording the backends share in their errors, so that every backend names
// durations and groups of ranks alike. Header-only; internal to cohort/comm.
#pragma once

#include <chrono>
#include <span>
#include <sstream>
#include <string>

namespace cohort::comm {

// "2.5 s"
inline std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream os;
  os << t.count() / 1000.0 << " s";
  return os.str();
}

// "rank 3" or "ranks 1, 3"
inline std::string ranks_text(std::span<const int> ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace cohort::comm
