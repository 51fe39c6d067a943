// cohort/common/json.h: the reader against hand-written documents, its
// errors (line, column, what was expected), and escape() round trips.
#include "cohort/common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "cohort/common/error.h"

namespace cohort::json::json_test {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse(text, "doc.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Json, ReadsEveryKind) {
  const Value v = parse(R"( {"n": -1.5e3, "t": true, "f": false, "z": null,
                            "s": "a\"b\\c\/\n\u00e9\ud83d\ude00", "a": [1, [], {}], "o": {"k": 0}} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.at("n").number(), -1500.0);
  EXPECT_TRUE(v.at("t").boolean());
  EXPECT_FALSE(v.at("f").boolean());
  EXPECT_TRUE(v.at("z").is_null());
  EXPECT_EQ(v.at("s").string(), "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
  ASSERT_EQ(v.at("a").items().size(), 3u);
  EXPECT_EQ(v.at("a").items()[0].number(), 1.0);
  EXPECT_TRUE(v.at("a").items()[1].is_array());
  EXPECT_TRUE(v.at("a").items()[2].is_object());
  EXPECT_EQ(v.at("o").at("k").number(), 0.0);
  EXPECT_EQ(v.find("missing"), nullptr);
  // Members keep file order.
  std::string keys;
  for (const auto& [k, _] : v.members()) keys += k;
  EXPECT_EQ(keys, "ntfzsao");
}

TEST(Json, NumbersAsStrtodReadsThem) {
  for (const char* text : {"0", "-0", "12345678901234567890", "1e-300", "6.02214076e23", "0.1", "-2.5E+2"})
    EXPECT_EQ(parse(text).number(), std::strtod(text, nullptr)) << text;
}

TEST(Json, PositionsPointAtValues) {
  const Value v = parse("{\n  \"a\": [1,\n        true]\n}", "x.json");
  EXPECT_EQ(v.at("a").where(), "x.json:2:8");
  EXPECT_EQ(v.at("a").items()[1].where(), "x.json:3:9");
}

TEST(Json, SyntaxErrorsNameLineColumnAndWhat) {
  {
    const std::string e = error_of("{\n  \"a\": 1,\n  \"b\" 2\n}");
    EXPECT_NE(e.find("doc.json:3:7"), std::string::npos) << e;
    EXPECT_NE(e.find("':'"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("[1, 2").find("truncated"), std::string::npos);
  EXPECT_NE(error_of("{\"a\": 1, \"a\": 2}").find("'a' appears twice"), std::string::npos);
  EXPECT_NE(error_of("[01]").find("leading zeros"), std::string::npos);
  EXPECT_NE(error_of("[1e999]").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("[\"\\ud800\"]").find("surrogate"), std::string::npos);
  for (const char* bad : {"", "[", "[1,]", "{\"a\" 1}", "[\"\x01\"]", "[1] x", "{'a': 1}", "[1.]", "tru", "[-]",
                          "{\"a\":}", "[\"\\x\"]", "[1e]", "nul"})
    EXPECT_FALSE(error_of(bad).empty()) << bad;
}

TEST(Json, DeepNestingIsAnErrorNotACrash) {
  EXPECT_NE(error_of(std::string(100000, '[')).find("nesting"), std::string::npos);
  EXPECT_NO_THROW(parse(std::string(500, '[') + std::string(500, ']')));
}

TEST(Json, TypedAccessNamesBothKinds) {
  const Value v = parse("{\"a\": \"text\"}", "t.json");
  try {
    v.at("a").number();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("t.json:1:7: expected a number, got a string"), std::string::npos) << e.what();
  }
  try {
    v.at("b");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("missing field 'b'"), std::string::npos) << e.what();
  }
}

TEST(Json, EscapeRoundTripsThroughParse) {
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  EXPECT_EQ(parse("\"" + escape(all) + "\"").string(), all);
  EXPECT_EQ(escape("a\"b\n"), "a\\\"b\\n");
}

TEST(Json, ParseFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "json_test_missing_file.json";
  std::remove(path.c_str());
  try {
    parse_file(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  const std::string good = ::testing::TempDir() + "json_test_file.json";
  std::ofstream(good) << "{\"x\": [1]}";
  EXPECT_EQ(parse_file(good).at("x").where(), good + ":1:7");
}

}  // namespace
}  // namespace cohort::json::json_test
