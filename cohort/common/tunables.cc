#include "cohort/common/tunables.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::tunables {
namespace {

const char* env_or_null(const char* variable) {
  const char* v = std::getenv(variable);
  return (v && *v) ? v : nullptr;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

template <typename T>
T read(const char* variable, T fallback, T (*parse)(const char*, const std::string&)) {
  const char* v = env_or_null(variable);
  return v ? parse(variable, v) : fallback;
}

std::string parse_string(const char*, const std::string& text) { return text; }

#define COHORT_TUNABLE_PARSE_Int parse_int
#define COHORT_TUNABLE_PARSE_Float parse_float
#define COHORT_TUNABLE_PARSE_Bool parse_bool
#define COHORT_TUNABLE_PARSE_String parse_string
#define COHORT_TUNABLE_NAME_Int "int"
#define COHORT_TUNABLE_NAME_Float "float"
#define COHORT_TUNABLE_NAME_Bool "bool"
#define COHORT_TUNABLE_NAME_String "string"
#define COHORT_TUNABLE_TEXT_Int(D) #D
#define COHORT_TUNABLE_TEXT_Float(D) #D
#define COHORT_TUNABLE_TEXT_Bool(D) #D
#define COHORT_TUNABLE_TEXT_String(D) D

constexpr Tunable kTable[] = {
#define X(accessor, NAME, TYPE, DEFAULT, DESCRIPTION) \
  {"COHORT_" #NAME, COHORT_TUNABLE_NAME_##TYPE, COHORT_TUNABLE_TEXT_##TYPE(DEFAULT), DESCRIPTION},
#include "cohort/common/tunables.def"
#undef X
};

}  // namespace

int64_t parse_int(const char* variable, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  // Accept binary suffixes (K, M, G) since sizes are the common case.
  int64_t scale = 1;
  if (end && *end) {
    switch (*end) {
      case 'k': case 'K': scale = int64_t{1} << 10; ++end; break;
      case 'm': case 'M': scale = int64_t{1} << 20; ++end; break;
      case 'g': case 'G': scale = int64_t{1} << 30; ++end; break;
    }
  }
  int64_t scaled = 0;  // the suffix must not overflow int64 either
  COHORT_CHECK_AS(ConfigError, errno == 0 && end != text.c_str() && *end == '\0' &&
                                   !__builtin_mul_overflow(static_cast<int64_t>(v), scale, &scaled))
      << variable << "='" << text << "' is not an integer (examples: 42, 0x10, 256K, 4M)";
  return scaled;
}

double parse_float(const char* variable, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  COHORT_CHECK_AS(ConfigError, errno == 0 && end != text.c_str() && *end == '\0')
      << variable << "='" << text << "' is not a number";
  return v;
}

bool parse_bool(const char* variable, const std::string& text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  COHORT_THROW(ConfigError) << variable << "='" << text << "' is not a boolean (use 0/1, true/false, on/off, yes/no)";
}

std::span<const Tunable> all() { return kTable; }

std::string format_table() {
  size_t wv = 0, wd = 0;
  for (const Tunable& t : kTable) {
    wv = std::max(wv, std::string_view(t.variable).size());
    wd = std::max(wd, std::string_view(t.default_text).size());
  }
  std::ostringstream os;
  for (const Tunable& t : kTable) {
    std::string def = t.default_text;
    os << "  " << t.variable << std::string(wv - std::string_view(t.variable).size() + 2, ' ')
       << t.type << std::string(8 - std::string_view(t.type).size(), ' ') << def
       << std::string(wd - def.size() + 2, ' ') << t.description;
    // Never echo the job secret: --help output ends up in logs.
    if (const char* v = env_or_null(t.variable))
      os << " [set: " << (std::string_view(t.variable) == "COHORT_SECRET" ? "<hidden>" : v) << ']';
    os << '\n';
  }
  return os.str();
}

#define COHORT_TUNABLE_DEFAULT_String(D) std::string(D)
#define COHORT_TUNABLE_DEFAULT_Int(D) int64_t(D)
#define COHORT_TUNABLE_DEFAULT_Float(D) double(D)
#define COHORT_TUNABLE_DEFAULT_Bool(D) bool(D)
#define X(accessor, NAME, TYPE, DEFAULT, DESCRIPTION)                               \
  COHORT_TUNABLE_TYPE_##TYPE accessor() {                                               \
    return read<COHORT_TUNABLE_TYPE_##TYPE>("COHORT_" #NAME,                        \
                                            COHORT_TUNABLE_DEFAULT_##TYPE(DEFAULT), \
                                            COHORT_TUNABLE_PARSE_##TYPE);           \
  }
#include "cohort/common/tunables.def"
#undef X

}  // namespace cohort::tunables
