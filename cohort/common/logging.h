// Levelled logging to stderr, prefixed with the rank:
//   COHORT_LOG(warn) << "rank 3 has not submitted " << name;
//   -> [cohort 0 W 16:24:42.123] rank 3 has not submitted grad/fc1
// The threshold comes from COHORT_LOG_LEVEL (default warn); a statement below
// it costs one comparison and evaluates none of its operands.
#pragma once

#include <sstream>
#include <string_view>

namespace cohort::logging {

enum class Level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

// The current threshold (read from COHORT_LOG_LEVEL once, settable for
// tests). Throws ConfigError while COHORT_LOG_LEVEL is malformed.
Level threshold();
// Whether a line at `level` would be written. Never throws: a malformed
// COHORT_LOG_LEVEL counts as "warn" here (errors raised while it is being
// read are logged through this).
bool would_log(Level level);
void set_threshold(Level level);
Level parse_level(std::string_view text);  // throws ConfigError

// The rank shown in the prefix; -1 (the default) shows "-".
void set_rank(int rank);

// One log line; written atomically (a single write(2)) when destroyed.
class Line {
 public:
  Line(Level level, const char* file, int line);
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

// Turns the streamed Line into void so both branches of COHORT_LOG agree.
struct Voidify {
  void operator&(const Line&) const {}
};

}  // namespace cohort::logging

// The conditional form (rather than if/else) keeps the macro a single
// expression, safe under an unbraced `if`.
#define COHORT_LOG(level)                                                          \
  (::cohort::logging::Level::level < ::cohort::logging::threshold())               \
      ? (void)0                                                                    \
      : ::cohort::logging::Voidify() &                                             \
            ::cohort::logging::Line(::cohort::logging::Level::level, __FILE__, __LINE__)
