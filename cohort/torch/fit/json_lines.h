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

#include "cohort/common/json_object.h"

namespace cohort {

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
