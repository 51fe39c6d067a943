// Metrics as JSON lines: one object per line, flushed as written, so a run
// can be followed with `tail -f` and read back with any JSON parser.
//
//   JsonLinesWriter m("metrics.jsonl", /*append=*/false);
//   m.write(JsonObject().add("event", "epoch").add("test_accuracy", 0.87));
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace cohort {

// A flat JSON object built field by field; strings are escaped, non-finite
// numbers become null (JSON has no NaN).
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, int64_t(value)); }
  JsonObject& add(std::string_view key, bool value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_escape(std::string_view text);

class JsonLinesWriter {
 public:
  JsonLinesWriter() = default;  // writes nothing
  // Writes `path` from scratch, or appends to it (a resumed run continues
  // its file); ConfigError when it cannot be opened.
  JsonLinesWriter(const std::string& path, bool append);
  bool enabled() const { return out_.is_open(); }
  void write(const JsonObject& object);

 private:
  std::ofstream out_;
};

}  // namespace cohort
