// Spec strings (NAME[:key=value,...]): parsing, validation against schemas
// with defaults, typed values, one-line errors naming the problem and the
// valid choices, and the help text.
#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/common/spec.h"

namespace cohort::spec_test {
namespace {

using Kind = SpecKey::Kind;

const std::vector<SpecSchema> kSchemas = {
    {.name = "plain", .description = "no keys"},
    {.name = "knobs",
     .description = "every kind",
     .keys = {{.name = "count", .kind = Kind::integer, .default_value = "2", .description = "a count", .min = 1},
              {.name = "rate", .kind = Kind::number, .default_value = "0.5", .description = "a rate"},
              {.name = "on", .kind = Kind::boolean, .default_value = "false", .description = "a switch"},
              {.name = "style", .kind = Kind::word, .default_value = "a", .description = "a word",
               .words = {"a", "b"}},
              {.name = "tag", .kind = Kind::word, .description = "free text", .optional = true}}},
    {.name = "needs", .description = "a required key", .keys = {{.name = "path", .description = "required"}}},
};

TEST(Spec, ParsesAndFillsDefaults) {
  const Spec s = parse_and_validate_spec("knobs:count=3,on=yes", kSchemas, "thing");
  EXPECT_EQ(s.name, "knobs");
  EXPECT_EQ(s.integer("count"), 3);
  EXPECT_EQ(s.number("rate"), 0.5);
  EXPECT_TRUE(s.boolean("on"));
  EXPECT_EQ(s.word("style"), "a");
  EXPECT_FALSE(s.has("tag"));
  EXPECT_EQ(s.str(), "knobs:count=3,on=yes,rate=0.5,style=a");
  EXPECT_EQ(parse_and_validate_spec("plain", kSchemas, "thing").str(), "plain");
  EXPECT_EQ(parse_and_validate_spec("knobs:tag=x", kSchemas, "thing").word("tag"), "x");
}

TEST(Spec, ErrorsAreOneLineAndNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "thing: empty spec"},
      {":count=1", "thing: '' is not a name"},
      {"Knobs", "thing: 'Knobs' is not a name"},
      {"nope", "unknown thing 'nope' (valid: plain, knobs, needs)"},
      {"plain:x=1", "thing 'plain': unknown key 'x' (it takes no keys)"},
      {"knobs:cnt=1", "thing 'knobs': unknown key 'cnt' (valid keys: count, rate, on, style, tag)"},
      {"knobs:", "thing 'knobs': nothing after ':'"},
      {"knobs:count", "thing 'knobs': 'count' is not key=value"},
      {"knobs:count=", "thing 'knobs': count needs one value, got ''"},
      {"knobs:count=1=2", "thing 'knobs': count needs one value, got '1=2'"},
      {"knobs:count=1,count=2", "thing 'knobs': count is set twice"},
      {"knobs:count=0", "thing 'knobs': count must be an integer >= 1, got '0'"},
      {"knobs:count=1.5", "thing 'knobs': count must be an integer >= 1, got '1.5'"},
      {"knobs:rate=fast", "thing 'knobs': rate must be a number, got 'fast'"},
      {"knobs:on=maybe", "thing 'knobs': on must be true or false, got 'maybe'"},
      {"knobs:style=c", "thing 'knobs': style must be one of a, b, got 'c'"},
      {"knobs:count=1,", "thing 'knobs': '' is not key=value"},
      {"needs", "thing 'needs': path is required"},
  };
  for (const auto& [text, want] : cases) {
    try {
      parse_and_validate_spec(text, kSchemas, "thing");
      ADD_FAILURE() << "no error for '" << text << "'";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(want), std::string::npos) << "'" << text << "': " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(Spec, HelpListsNamesKeysDefaultsAndWords) {
  const std::string help = format_spec_schemas(kSchemas);
  for (const std::string s : {"plain", "knobs", "count=2", "rate=0.5", "style=a", "(a, b)", "path=..."})
    EXPECT_NE(help.find(s), std::string::npos) << s << "\n" << help;
}

}  // namespace
}  // namespace cohort::spec_test
