// Typed access to the COHORT_* environment tunables declared in tunables.def.
//
// Each tunable gets an accessor `cohort::tunables::name()` that
// reads COHORT_<NAME> on every call and returns the default when it is unset
// or empty. A malformed value throws ConfigError naming the variable, the
// value and the expected type.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace cohort::tunables {

struct Tunable {
  const char* variable;      // "COHORT_TIMEOUT_S"
  const char* type;          // "int", "float", "bool", "string"
  const char* default_text;  // "300"
  const char* description;
};

// Every tunable, in table order.
std::span<const Tunable> all();

// The table as aligned text (variable, type, default, current value, description).
std::string format_table();

// Typed parsers shared by the accessors; `variable` names the source in errors.
int64_t parse_int(const char* variable, const std::string& text);
double parse_float(const char* variable, const std::string& text);
bool parse_bool(const char* variable, const std::string& text);

#define COHORT_TUNABLE_TYPE_Int int64_t
#define COHORT_TUNABLE_TYPE_Float double
#define COHORT_TUNABLE_TYPE_Bool bool
#define COHORT_TUNABLE_TYPE_String std::string
#define X(accessor, NAME, TYPE, DEFAULT, DESCRIPTION) COHORT_TUNABLE_TYPE_##TYPE accessor();
#include "cohort/common/tunables.def"
#undef X

}  // namespace cohort::tunables
