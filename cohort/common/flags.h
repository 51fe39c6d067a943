// Command lines for programs (the examples, bench/, tools/): `--name value`,
// `--name=value` and switches, each value one number or one word from a list,
// or a ConfigError that names the flag and what it got (programs print it as
// one line with one_line_message and exit 2).
#pragma once

#include <charconv>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cohort/common/check.h"

namespace cohort::flags {

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

// As above, and at least `min`.
template <typename T>
T parse_number(const std::string& flag, const std::string& text, T min) {
  const T value = parse_number<T>(flag, text);
  COHORT_CHECK_AS(ConfigError, value >= min) << flag << " must be at least " << min << ", got " << text;
  return value;
}

// `text` when it is one of `allowed`.
inline std::string one_of(const std::string& flag, const std::string& text,
                          const std::vector<std::string>& allowed) {
  std::string list;
  for (const std::string& a : allowed) {
    if (text == a) return text;
    list += list.empty() ? a : ", " + a;
  }
  COHORT_THROW(ConfigError) << flag << " expects one of " << list << ", got '" << text << "'";
}

// An error's text for one line on a terminal: what() (which leads with the
// message: "--steps expects a number, got 'x'"; see check.h), with any line
// break turned into a space.
inline std::string one_line_message(const std::exception& e) {
  std::string what = e.what();
  for (char& c : what)
    if (c == '\n') c = ' ';
  return what;
}

using FlagSetter = std::function<void(const std::string& flag, const std::string& value)>;

// Walks `args`: a flag in `with_value` takes the next argument or what follows
// its '=', a flag in `switches` takes nothing. Anything else is a ConfigError
// naming it, as is a value flag at the end or a switch given a value.
inline void parse_flags(const std::vector<std::string>& args, const std::map<std::string, FlagSetter>& with_value,
                        const std::map<std::string, std::function<void()>>& switches) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (auto s = switches.find(flag); s != switches.end()) {
      COHORT_CHECK_AS(ConfigError, !has_value) << flag << " takes no value";
      s->second();
      continue;
    }
    auto it = with_value.find(flag);
    COHORT_CHECK_AS(ConfigError, it != with_value.end()) << "unknown flag '" << args[i] << "'";
    if (!has_value) {
      COHORT_CHECK_AS(ConfigError, i + 1 < args.size()) << flag << " needs a value";
      value = args[++i];
    }
    it->second(flag, value);
  }
}

// For programs whose flags are all integers of at least 0: parses
// `--name value` into the ints of `flags`. Returns 0, or 2 after printing
// the error as one line prefixed with argv[0] (a bad value or an unknown
// flag is never silently ignored).
inline int parse_int_flags(int argc, char** argv, const std::map<std::string, int*>& flags) {
  std::map<std::string, FlagSetter> setters;
  for (const auto& [name, target] : flags)
    setters[name] = [target](const std::string& f, const std::string& v) { *target = parse_number<int>(f, v, 0); };
  try {
    parse_flags(std::vector<std::string>(argv + 1, argv + argc), setters, {});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], one_line_message(e).c_str());
    return 2;
  }
}

}  // namespace cohort::flags
