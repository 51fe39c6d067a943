// Flag values for the examples' command lines: one number or one word from a
// list, or a ConfigError that names the flag and what it got (the programs
// print it as one line and exit 2).
#pragma once

#include <charconv>
#include <initializer_list>
#include <string>

#include "cohort/common/check.h"

namespace cohort::examples {

// The whole of `text` as a T (no sign or trailing characters T cannot take).
template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  COHORT_CHECK_AS(ConfigError, ec == std::errc() && ptr == end && !text.empty())
      << flag << " expects a number, got '" << text << "'";
  return value;
}

// `text` when it is one of `allowed`.
inline std::string one_of(const std::string& flag, const std::string& text,
                          std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (text == a) return text;
    list += list.empty() ? a : std::string(", ") + a;
  }
  COHORT_THROW(ConfigError) << flag << " expects one of " << list << ", got '" << text << "'";
}

}  // namespace cohort::examples
