// The COHORT_* tunables table: defaults, parsing, errors, the printed table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "cohort/common/error.h"
#include "cohort/common/tunables.h"

namespace cohort::tunables::tunables_test {
namespace {

// Sets (or unsets, with nullopt) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

template <typename Fn>
std::string config_error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every accessor returns its table default when its variable is unset, and
// that default is what the table's text says (parsed the way a user's value
// would be).
TEST(Tunables, EveryAccessorReturnsItsDocumentedDefault) {
#define COHORT_EXPECT_DEFAULT_Int(variable, text, value) EXPECT_EQ(value, parse_int(variable, text))
#define COHORT_EXPECT_DEFAULT_Float(variable, text, value) EXPECT_EQ(value, parse_float(variable, text))
#define COHORT_EXPECT_DEFAULT_Bool(variable, text, value) EXPECT_EQ(value, parse_bool(variable, text))
#define COHORT_EXPECT_DEFAULT_String(variable, text, value) EXPECT_EQ(value, std::string(text))
  size_t rows = 0;
  for (const Tunable& t : all()) {
    SCOPED_TRACE(t.variable);
    ScopedEnv unset(t.variable, std::nullopt);
    bool found = false;
#define X(accessor, NAME, TYPE, DEFAULT, DESCRIPTION)                                   \
  if (std::string(t.variable) == "COHORT_" #NAME) {                                     \
    found = true;                                                                       \
    EXPECT_STREQ(t.type, #TYPE[0] == 'I' ? "int" : #TYPE[0] == 'F' ? "float"            \
                                             : #TYPE[0] == 'B' ? "bool" : "string");    \
    COHORT_EXPECT_DEFAULT_##TYPE(t.variable, t.default_text, accessor());               \
  }
#include "cohort/common/tunables.def"
#undef X
    EXPECT_TRUE(found) << "table row without an accessor";
    EXPECT_GT(std::string(t.description).size(), 10u) << "every tunable is described";
    ++rows;
  }
  size_t declared = 0;
#define X(accessor, NAME, TYPE, DEFAULT, DESCRIPTION) ++declared;
#include "cohort/common/tunables.def"
#undef X
  EXPECT_EQ(rows, declared);
}

TEST(Tunables, CoreDefaults) {
  ScopedEnv a("COHORT_LOG_LEVEL", std::nullopt);
  ScopedEnv b("COHORT_TIMEOUT_S", std::nullopt);
  ScopedEnv c("COHORT_SPIN_US", std::nullopt);
  ScopedEnv d("COHORT_SECRET", std::nullopt);
  EXPECT_EQ(log_level(), "warn");
  EXPECT_EQ(timeout_s(), 300.0);
  EXPECT_EQ(spin_us(), -1);
  EXPECT_EQ(secret(), "");
}

TEST(Tunables, EmptyValueMeansDefault) {
  ScopedEnv e("COHORT_TIMEOUT_S", "");
  EXPECT_EQ(timeout_s(), 300.0);
}

TEST(Tunables, ValidValuesAreReadOnEveryCall) {
  {
    ScopedEnv e("COHORT_TIMEOUT_S", "2.5");
    EXPECT_EQ(timeout_s(), 2.5);
  }
  {
    ScopedEnv e("COHORT_TIMEOUT_S", "1e-3");
    EXPECT_EQ(timeout_s(), 1e-3);
  }
  {
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", "4096");
    EXPECT_EQ(shm_slot_bytes(), 4096);
  }
  {
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", "256K");
    EXPECT_EQ(shm_slot_bytes(), 256 * 1024);
  }
  {
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", "4M");
    EXPECT_EQ(shm_slot_bytes(), 4 * 1024 * 1024);
  }
  {
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", "1g");
    EXPECT_EQ(shm_slot_bytes(), int64_t{1} << 30);
  }
  {
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", "0x10");
    EXPECT_EQ(shm_slot_bytes(), 16);
  }
  {
    ScopedEnv e("COHORT_SPIN_US", "-5");
    EXPECT_EQ(spin_us(), -5);
  }
  {
    ScopedEnv e("COHORT_BACKEND", "shm");
    EXPECT_EQ(backend(), "shm");
  }
}

TEST(Tunables, MalformedIntegerNamesTheVariable) {
  for (const char* bad : {"abc", "12Q", "4MB", "1.5", "99999999999999999999", " ", "9223372036854775807K",
                          "-9000000000000000000M"}) {
    SCOPED_TRACE(bad);
    ScopedEnv e("COHORT_SHM_SLOT_BYTES", bad);
    const std::string what = config_error_of([] { shm_slot_bytes(); });
    EXPECT_TRUE(contains(what, "COHORT_SHM_SLOT_BYTES")) << what;
    EXPECT_TRUE(contains(what, std::string("'") + bad + "'")) << what;
  }
}

TEST(Tunables, MalformedFloatNamesTheVariable) {
  for (const char* bad : {"soon", "3s", "1e999"}) {
    SCOPED_TRACE(bad);
    ScopedEnv e("COHORT_TIMEOUT_S", bad);
    const std::string what = config_error_of([] { timeout_s(); });
    EXPECT_TRUE(contains(what, "COHORT_TIMEOUT_S")) << what;
    EXPECT_TRUE(contains(what, bad)) << what;
  }
}

TEST(Tunables, BoolSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "on", "Yes"}) EXPECT_TRUE(parse_bool("COHORT_X", yes)) << yes;
  for (const char* no : {"0", "false", "Off", "no"}) EXPECT_FALSE(parse_bool("COHORT_X", no)) << no;
  const std::string what = config_error_of([] { parse_bool("COHORT_FLAG", "maybe"); });
  EXPECT_TRUE(contains(what, "COHORT_FLAG")) << what;
  EXPECT_TRUE(contains(what, "maybe")) << what;
}

TEST(Tunables, FormatTableListsEveryTunable) {
  ScopedEnv e("COHORT_BACKEND", "shm");
  const std::string table = format_table();
  for (const Tunable& t : all()) {
    SCOPED_TRACE(t.variable);
    const size_t at = table.find(std::string(t.variable) + " ");
    ASSERT_NE(at, std::string::npos) << table;
    const std::string line = table.substr(at, table.find('\n', at) - at);
    EXPECT_TRUE(contains(line, t.type)) << line;
    EXPECT_TRUE(contains(line, t.description)) << line;
    if (*t.default_text) {
      EXPECT_TRUE(contains(line, t.default_text)) << line;
    }
  }
  EXPECT_TRUE(contains(table, "[set: shm]")) << "shows values that are set: " << table;
  size_t lines = 0;
  for (char c : table) lines += c == '\n';
  EXPECT_EQ(lines, all().size());
}

}  // namespace
}  // namespace cohort::tunables::tunables_test
