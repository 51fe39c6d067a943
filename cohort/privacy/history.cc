#include "cohort/privacy/history.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "cohort/common/check.h"

namespace cohort::privacy {

void validate(const Segment& s) {
  COHORT_CHECK_AS(ConfigError, s.noise_multiplier >= 0)
      << "noise multiplier must be non-negative, got " << s.noise_multiplier;
  COHORT_CHECK_AS(ConfigError, s.sample_rate >= 0 && s.sample_rate <= 1)
      << "sample rate must be in [0, 1], got " << s.sample_rate;
  COHORT_CHECK_AS(ConfigError, s.steps >= 0) << "steps must be non-negative, got " << s.steps;
}

void append_steps(History& history, double noise_multiplier, double sample_rate, int64_t steps) {
  const Segment next{noise_multiplier, sample_rate, steps};
  validate(next);
  if (steps == 0) return;
  if (!history.empty() && history.back().noise_multiplier == noise_multiplier &&
      history.back().sample_rate == sample_rate) {
    history.back().steps += steps;
    return;
  }
  history.push_back(next);
}

int64_t total_steps(const History& history) {
  int64_t total = 0;
  for (const Segment& s : history) total += s.steps;
  return total;
}

std::string encode_history(const History& history) {
  std::string text;
  char line[96];
  for (const Segment& s : history) {
    // %.17g: 17 significant digits read back to the same double.
    std::snprintf(line, sizeof line, "%.17g %.17g %lld\n", s.noise_multiplier, s.sample_rate,
                  static_cast<long long>(s.steps));
    text += line;
  }
  return text;
}

namespace {

template <typename T>
T parse_field(std::string_view line, std::string_view& rest, const char* what) {
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  T value{};
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  COHORT_CHECK_AS(ConfigError, ec == std::errc() && end != rest.data())
      << "privacy history: bad " << what << " in line '" << line << "'";
  rest.remove_prefix(end - rest.data());
  return value;
}

}  // namespace

History decode_history(std::string_view text) {
  History history;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    COHORT_CHECK_AS(ConfigError, eol != std::string_view::npos)
        << "privacy history: last line is not terminated (truncated?)";
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    std::string_view rest = line;
    Segment s;
    s.noise_multiplier = parse_field<double>(line, rest, "noise multiplier");
    s.sample_rate = parse_field<double>(line, rest, "sample rate");
    s.steps = parse_field<int64_t>(line, rest, "step count");
    COHORT_CHECK_AS(ConfigError, rest.empty()) << "privacy history: trailing text in line '" << line << "'";
    validate(s);
    history.push_back(s);
  }
  return history;
}

}  // namespace cohort::privacy
